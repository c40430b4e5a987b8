#!/usr/bin/env bash
# The main job: install what is missing, build, and run the DotReluDot sample
# on 8 simulated devices (mesh data=2,model=4), checked against the oracle.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh --target dot_relu_dot_main
export OPENBLAS_NUM_THREADS=1  # each simulated device is one thread
"${SHARC_BUILD_DIR:-build}"/samples/dot_relu_dot/dot_relu_dot_main "$@"
