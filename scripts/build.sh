#!/usr/bin/env bash
# Configures and builds sharc into ${SHARC_BUILD_DIR:-build} with Ninja.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${SHARC_BUILD_DIR:-build}
jobs=${SHARC_JOBS:-$(nproc)}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$jobs" "$@"
