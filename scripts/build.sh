#!/usr/bin/env bash
# Configures and builds sharc into ${SHARC_BUILD_DIR:-build} with Ninja.
# SHARC_WERROR=ON turns compiler warnings in sharc's own targets into errors
# (CI sets it: .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${SHARC_BUILD_DIR:-build}
jobs=${SHARC_JOBS:-$(nproc)}
# SHARC_WERROR is passed only when set, so a plain rebuild keeps the tree's
# setting (a tree CI configured stays -Werror without a full rebuild).
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  ${SHARC_WERROR:+-DSHARC_WERROR="$SHARC_WERROR"} >/dev/null
cmake --build "$build" -j "$jobs" "$@"
