#!/usr/bin/env bash
# Regenerates the emitter's golden files under tests/golden/ on purpose: builds
# the sample's generated program (dot_relu_dot on data=2,model=4), the smallest
# pipelined program, sharc-lift's lifted test functions and the golden tests, then runs the tests with
# SHARC_UPDATE_GOLDENS=1, which makes them write what they would otherwise
# compare. Review `git diff tests/golden` like
# code: a refactor that changes a golden is not a refactor.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${SHARC_BUILD_DIR:-build}
scripts/build.sh --target dot_relu_dot emit_golden_test pipeline_tiny_2x2 pipeline_golden_test lift_test
SHARC_UPDATE_GOLDENS=1 "$build"/tests/emit/emit_golden_test --gtest_filter='EmitGolden.DotReluDot2x4*'
SHARC_UPDATE_GOLDENS=1 "$build"/tests/pipeline/pipeline_golden_test
SHARC_UPDATE_GOLDENS=1 "$build"/tests/lift/lift_test --gtest_filter='LiftGolden.*'
git --no-pager diff --stat -- tests/golden || true
