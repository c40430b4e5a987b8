// sharc-calibrate's transcendental functions, in a file of their own: it
// compiles with the generated code's flags (bench/CMakeLists.txt), so that
// exp and gelu vectorise as they do in a step's loops.
#pragma once

#include "runtime/thread_world.h"

namespace sharc::bench {

// The mean seconds per element of the generated code's exp, gelu and
// random numbers (runtime/elementwise.h, philox.h), each evaluated over a
// block in cache by every device of `world` at once, the fastest of
// `repeats` runs.
double transcendental_seconds(rt::ThreadWorld& world, int repeats);

}  // namespace sharc::bench
