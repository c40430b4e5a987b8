// What sharc-lift makes of one SHARC_ELEMENTWISE function: its body as a
// sharc IR graph over scalars, and what the header writer needs to declare
// its Tensor form. Clang-free, so the writer and its tests build without
// LibTooling.
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace sharc::lift {

struct LiftedFunction {
  std::string name;                     // the C++ name, unqualified
  std::vector<std::string> namespaces;  // enclosing namespaces, outermost first
  std::vector<std::string> params;      // parameter names, in order
  std::string signature;                // as written: "float huber(float x, float delta)"
  SrcLoc loc;                           // the function's name in the source
  // The body: one Input (shape [], named after the parameter) per parameter,
  // in order, constants, elementwise ops and selects, all of shape [], and
  // one output "result". A node's loc is the expression it lifts (with its
  // column), its name that expression's source text.
  ir::Graph graph;
};

// The generated header: for each function, the Tensor overload built from
// DSL calls, one per IR node, each commented with its source position.
// `source` is the lifted file as the header names it.
std::string write_header(const std::vector<LiftedFunction>& functions, const std::string& source);

// Every function's lifted IR in the printer's text form, for goldens and
// --ir: a "// float huber(float x, float delta) at file:line" line, then the
// graph.
std::string lifted_ir_text(const std::vector<LiftedFunction>& functions);

}  // namespace sharc::lift
