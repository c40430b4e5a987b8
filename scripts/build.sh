#!/usr/bin/env bash
# Configures and builds sharc into ${SHARC_BUILD_DIR:-build} with Ninja.
# SHARC_WERROR=ON turns compiler warnings in sharc's own targets into errors
# (CI sets it: .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keys without the checkout's path (the sources' paths are made
# relative under it, and the working directory is not hashed; the objects
# themselves carry relative paths: CMakeLists.txt's -ffile-prefix-map), so a
# fresh clone anywhere reuses what any other checkout compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR=1
build=${SHARC_BUILD_DIR:-build}
jobs=${SHARC_JOBS:-$(nproc)}
# SHARC_REQUIRE_LIFT=ON and SHARC_REQUIRE_CUDA=ON make configuring fail
# when sharc-lift (Clang LibTooling) or the CUDA kernels (nvcc) cannot be
# built, instead of building without them (CI sets both).
# These are passed only when set, so a plain rebuild keeps the tree's
# settings (a tree CI configured stays -Werror without a full rebuild).
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  ${SHARC_WERROR:+-DSHARC_WERROR="$SHARC_WERROR"} \
  ${SHARC_REQUIRE_LIFT:+-DSHARC_REQUIRE_LIFT="$SHARC_REQUIRE_LIFT"} \
  ${SHARC_REQUIRE_CUDA:+-DSHARC_REQUIRE_CUDA="$SHARC_REQUIRE_CUDA"} >/dev/null
cmake --build "$build" -j "$jobs" "$@"
