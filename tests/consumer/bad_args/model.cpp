// A correct model: every mistake in this project is in its CMakeLists.txt.
#include "dsl/sharc.h"

using namespace sharc;

SHARC_PROGRAM(bad, b) { b.output("y", relu(b.input("x", {8, 8}, P("data", None)))); }
