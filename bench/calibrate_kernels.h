// sharc-calibrate's loops that stand for a step's elementwise statements
// (transcendental functions, adds), in a file of their own: it compiles
// with the generated code's flags (bench/CMakeLists.txt), so that they
// vectorise as they do in a step's loops.
#pragma once

#include <cstdint>

#include "runtime/thread_world.h"

namespace sharc::bench {

// The mean seconds per element of the generated code's exp, gelu and
// random numbers (runtime/elementwise.h, philox.h), each evaluated over a
// block in cache by every device of `world` at once, the fastest of
// `repeats` runs.
double transcendental_seconds(rt::ThreadWorld& world, int repeats);

// c[j] += x[j] for j < n, as a generated elementwise statement runs it (its
// iterations independent). In the calibrator's own flags (-O2) GCC 12 does
// not vectorise this loop: on the CI machine's EPYC it then measured 2.0e9
// B/s a device for arrays in cache and out of it alike.
void add_in_place(float* c, const float* x, int64_t n);

}  // namespace sharc::bench
