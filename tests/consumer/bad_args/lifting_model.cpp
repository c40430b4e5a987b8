// A model that marks a function for sharc-lift: configuring it without the
// tool must stop and say what to install (bad_args case lift_without_tool).
#include "dsl/sharc.h"

SHARC_ELEMENTWISE inline float twice(float x) { return 2.0f * x; }

SHARC_PROGRAM(bad, b) { b.output("y", b.input("x", {4})); }
