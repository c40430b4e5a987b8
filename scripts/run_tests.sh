#!/usr/bin/env bash
# Install what is missing, build everything, and run every test under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
export OPENBLAS_NUM_THREADS=1  # each simulated device is one thread
ctest --test-dir "${SHARC_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
