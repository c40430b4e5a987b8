@SHARC_BANNER@
//
// @SHARC_PART_TITLE@
// A large program's step is spread over several files so that the build
// compiles them in parallel. The main source, which says what the program
// does and runs the parts in order: @SHARC_SOURCE_NAME@.
//
// The fixed text comes from templates/program_part.cpp; codegen/emit_cpu.cpp
// fills in the program-specific parts.
#include "@SHARC_STEP_HEADER_NAME@"

namespace @SHARC_NAMESPACE@ {
@SHARC_STEP_PARTS@

}  // namespace @SHARC_NAMESPACE@
