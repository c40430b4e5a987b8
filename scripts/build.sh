#!/usr/bin/env bash
# Configures and builds sharc into ${SHARC_BUILD_DIR:-build} with Ninja.
# SHARC_WERROR=ON turns compiler warnings in sharc's own targets into errors
# (CI sets it: .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${SHARC_BUILD_DIR:-build}
jobs=${SHARC_JOBS:-$(nproc)}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSHARC_WERROR="${SHARC_WERROR:-OFF}" >/dev/null
cmake --build "$build" -j "$jobs" "$@"
