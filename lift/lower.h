// The Clang half of sharc-lift: finds the SHARC_ELEMENTWISE functions of a
// translation unit and lowers each body to a LiftedFunction, reporting what
// it cannot lower through Clang's diagnostics (file:line:col, the line, a
// caret).
#pragma once

#include <string>
#include <vector>

#include "lift/lifted_function.h"

namespace clang {
class ASTContext;
class FunctionDecl;
}  // namespace clang

namespace sharc::lift {

// Source positions are recorded relative to `source_root` when under it.
struct LowerOptions {
  std::string source_root;
  int max_loop_iterations = 1024;  // per loop, after which unrolling refuses
};

// True for a function marked SHARC_ELEMENTWISE (annotate("sharc_elementwise")).
bool is_lifted(const clang::FunctionDecl& f);

// Lowers every marked function defined in the main file or the headers it
// includes (not system headers), in source order. Errors are reported on
// ctx's diagnostics engine, and the functions with errors are left out.
std::vector<LiftedFunction> lower_translation_unit(clang::ASTContext& ctx,
                                                   const LowerOptions& options);

}  // namespace sharc::lift
