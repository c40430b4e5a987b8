// The CPU renderer; see emit_cpu.h. CpuEmitter takes fusion, buffers, last
// uses, names and the schedule from plan_emission() (emission_plan.h; its
// buffer plan is what the report replays to predict memory) and prints each
// template placeholder's text with the spelling helpers of cpp_writer.h.
// Every statement it prints for a node mirrors the corresponding case of
// execute_partitioned() (codegen/execute.cpp).
#include "codegen/emit_cpu.h"

#include <algorithm>
#include <cctype>
#include <array>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "codegen/buffer_plan.h"
#include "codegen/cpp_writer.h"
#include "codegen/emission_plan.h"
#include "codegen/execute.h"
#include "codegen/interpret.h"
#include "codegen/op_cost.h"
#include "codegen/report.h"
#include "codegen/ring_plan.h"
#include "runtime/team.h"

namespace sharc {

namespace {

using cpp::braced;
using cpp::CodeWriter;
using cpp::double_literal;
using cpp::float_literal;
using cpp::init_kind_name;
using cpp::join;
using cpp::quoted;
using cpp::reduce_op;
using ir::Node;
using ir::Op;
using ir::Shape;

// ---------------------------------------------------------------------------

std::string loc_prefix(const Node& n) {
  std::string s = n.loc.known() ? n.loc.str() : "";
  if (!n.name.empty() && !ir::is_source(n.op)) s += (s.empty() ? "" : " ") + n.name;
  return s.empty() ? "" : s + ": ";
}

std::string shape_comment(const Node& n) {
  return ir::shape_str(n.shape, n.dtype) + (n.sharding ? " " + n.sharding->str() : "");
}

class CpuEmitter {
 public:
  // The plan (plan_emission) decides fusion, buffers, names and the
  // schedule; this class only spells it as C++ for a device thread, where the
  // two streams are one: plan order respects every wait, and a ring's
  // transfers overlap its GEMMs through ppermute_start / ppermute_wait.
  // A pipelined program passes its stage plan and stage programs: the API
  // and the Device members come from the whole program `g`, and each
  // stage's body from a CpuEmitter of that stage's graph (device_scope = g).
  CpuEmitter(const ir::Graph& g, const EmitOptions& o, const StagePlan* plan = nullptr,
             const std::vector<ir::Graph>* stages = nullptr, const ir::Graph* device_scope = nullptr)
      : g_(g),
        o_(o),
        mesh_(g.mesh),
        plan_stages_(plan),
        stages_(stages),
        pipe_axis_(g.pipeline ? g.pipeline->axis : ""),
        ep_(plan_emission(g, device_scope)),
        plan_(ep_.buffers),
        var_(ep_.var),
        axis_var_(ep_.axis_var),
        field_(ep_.input_field),
        out_field_(ep_.output_field),
        group_var_(ep_.group_var),
        locals_(ep_.locals) {
    if (stages_)
      for (size_t s = 0; s < stages_->size(); ++s)
        for (const Node& v : (*stages_)[s].nodes)
          if (v.op == Op::kParameter) holders_[v.name].push_back(static_cast<int>(s));
  }

  EmittedFiles run() {
    const std::string body = forward_body(1);  // before the Step's struct and parts, which it makes
    const std::string stem = o_.header_name.substr(0, o_.header_name.rfind('.'));
    std::vector<std::pair<std::string, std::string>> common = {
        {"SHARC_BANNER", banner()},
        {"SHARC_NAMESPACE", o_.cpp_namespace},
    };
    auto with = [&](std::vector<std::pair<std::string, std::string>> v) {
      v.insert(v.begin(), common.begin(), common.end());
      return v;
    };
    EmittedFiles f;
    f.header = fill_template(o_.templates.header,
                             with({{"SHARC_PROGRAM", quoted(o_.program)},
                                   {"SHARC_NUM_DEVICES", std::to_string(mesh_.num_devices())},
                                   {"SHARC_MESH_LITERAL", "R\"(" + mesh_.str() + ")\""},
                                   {"SHARC_MESH_SHAPE", mesh_shape_literal()},
                                   {"SHARC_TENSOR_INFO", tensor_info()},
                                   {"SHARC_INPUT_FIELDS", io_fields(true)},
                                   {"SHARC_OUTPUT_FIELDS", io_fields(false)}}),
                             "templates/program.h");
    f.step_header = fill_template(o_.templates.step_header,
                                  with({{"SHARC_HEADER_NAME", o_.header_name},
                                        {"SHARC_SOURCE_NAME", source_file_name(stem, 0)},
                                        {"SHARC_DEVICE_FIELDS", device_fields()},
                                        {"SHARC_STEP_STRUCT", step_struct_}}),
                                  "templates/program_step.h");
    // Everything of the main source but its share of the step, made once.
    const std::vector<std::pair<std::string, std::string>> source_values =
                           with({{"SHARC_STEP_HEADER_NAME", step_header_name(stem)},
                                 {"SHARC_TENSOR_DEFINITIONS", tensor_definitions()},
                                 {"SHARC_INIT_SPECS", init_specs()},
                                 {"SHARC_DEVICE_SETUP", device_setup()},
                                 {"SHARC_INIT_BODY", init_body()},
                                 {"SHARC_FORWARD_BODY", body},
                                 {"SHARC_PARAMETER_SHARD", parameter_lookup(false)},
                                 {"SHARC_PARAMETER_SHARD_SIZE", parameter_lookup(true)},
                                 {"SHARC_INPUTS_SET", io_set(true)},
                                 {"SHARC_INPUTS_SET_I32", io_set(true, ir::DType::kI32)},
                                 {"SHARC_OUTPUTS_SET", io_set(false)},
                                 {"SHARC_IO_CHECKS", io_checks()},
                                 {"SHARC_COMPLETE_OUTPUTS", complete_outputs()},
                                 {"SHARC_HOLDS_PARAMETER", holds_parameter()},
                                 {"SHARC_SET_PARAMETER", parameter_transfer(true)},
                                 {"SHARC_GET_PARAMETER", parameter_transfer(false)}});
    auto source = [&](const std::string& fns, const std::string& where) {
      std::vector<std::pair<std::string, std::string>> v = source_values;
      v.emplace_back("SHARC_STEP_PARTS", fns);
      v.emplace_back("SHARC_PARTS_WHERE", where);
      return fill_template(o_.templates.source, v, "templates/program.cpp");
    };

    // The step's functions, in the order they run, fill the files in turn:
    // as many files as the lines need (kLinesPerFile each, the main
    // source's own lines counted), at most o_.files, about equally full.
    const int files = std::max(1, o_.files);
    std::vector<std::vector<size_t>> in_file(files);
    {
      auto lines = [](const std::string& t) { return static_cast<double>(std::count(t.begin(), t.end(), '\n') + 1); };
      const double fixed = lines(source("", ""));
      double total = fixed;
      for (const StepFn& fn : step_fns_) total += lines(fn.text) + 1;
      const int used = std::clamp(static_cast<int>(std::ceil(total / kLinesPerFile)), 1, files);
      const double share = total / used;
      double before = fixed;
      for (size_t i = 0; i < step_fns_.size(); ++i) {
        const double n = lines(step_fns_[i].text) + 1;
        in_file[std::min(used - 1, static_cast<int>((before + n / 2) / share))].push_back(i);
        before += n;
      }
    }
    auto definitions = [&](int k) {
      std::string t;
      for (size_t i : in_file[k]) t += "\n\n" + step_fns_[i].text;
      return t;
    };
    auto range = [&](int k) {
      const std::string& a = step_fns_[in_file[k].front()].name;
      const std::string& b = step_fns_[in_file[k].back()].name;
      return a == b ? a + "()" : a + "() to " + b + "()";
    };
    std::vector<std::string> elsewhere;
    for (int k = 1; k < files; ++k)
      if (!in_file[k].empty()) elsewhere.push_back(source_file_name(stem, k) + " (" + range(k) + ")");
    std::string where;
    if (elsewhere.empty())
      where = "all of them are below, after forward_device().";
    else
      where = std::string(in_file[0].empty() ? "none is below: they are in " : "the first ones are below, after forward_device(), the others in ") +
              (elsewhere.size() == 1 ? elsewhere[0]
                                     : join(std::vector<std::string>(elsewhere.begin(), elsewhere.end() - 1), ", ") +
                                           " and " + elsewhere.back()) +
              ".";
    f.source = source(definitions(0), comment_lines(where, std::string("// Program::Step; ").size()));
    for (int k = 1; k < files; ++k) {
      const std::string head =
          "Part " + std::to_string(k + 1) + " of " + std::to_string(files) + " of program " + o_.program + "'s step: ";
      if (in_file[k].empty()) {  // nothing to compile, not even the headers
        f.parts.push_back(banner() + "\n//\n// " +
                          comment_lines(head + "empty. The step fits in fewer files (" + source_file_name(stem, 0) +
                                            " says where it is).",
                                        3) +
                          "\n");
        continue;
      }
      const std::string title = head + range(k) + ".";
      f.parts.push_back(fill_template(o_.templates.part,
                                      with({{"SHARC_PART_TITLE", comment_lines(title, 3)},
                                            {"SHARC_SOURCE_NAME", source_file_name(stem, 0)},
                                            {"SHARC_STEP_HEADER_NAME", step_header_name(stem)},
                                            {"SHARC_STEP_PARTS", definitions(k).substr(1)}}),
                                      "templates/program_part.cpp"));
    }
    f.marks = std::move(*marks_);
    place_marks(f);
    return f;
  }

  // `text` wrapped as comment lines of at most 80 columns, words unbroken:
  // the first line goes on after `first_col` columns of the caller's, the
  // others start with "// ".
  static std::string comment_lines(const std::string& text, size_t first_col) {
    std::istringstream words(text);
    std::string out, word;
    size_t col = first_col;
    bool fresh = true;
    while (words >> word) {
      if (!fresh && col + 1 + word.size() > 80) {
        out += "\n// ";
        col = 3;
        fresh = true;
      }
      if (!fresh) {
        out += ' ';
        ++col;
      }
      out += word;
      col += word.size();
      fresh = false;
    }
    return out;
  }

  // Gives each mark its file and line: marks were recorded in the order
  // they were written, which is the order of the files and of their lines,
  // one per line that starts (after its indentation) with "timeline.op(" or
  // "timeline.comm_op(", and each such line names its label.
  static void place_marks(EmittedFiles& f) {
    size_t next = 0;
    for (int file = 0; file <= static_cast<int>(f.parts.size()); ++file) {
      std::istringstream in(f.file(file));
      std::string text;
      for (int line = 1; std::getline(in, text); ++line) {
        const size_t at = text.find_first_not_of(' ');
        if (at == std::string::npos ||
            (text.compare(at, 12, "timeline.op(") != 0 && text.compare(at, 17, "timeline.comm_op(") != 0))
          continue;
        const std::string where = "emit_cpu: line " + std::to_string(line) + " of file " + std::to_string(file);
        if (next == f.marks.size()) internal_error(where + " marks the timeline, but no mark was recorded for it");
        if (text.find(quoted(f.marks[next].label)) == std::string::npos)
          internal_error(where + " is not the mark of " + f.marks[next].label);
        f.marks[next].file = file;
        f.marks[next++].line = line;
      }
    }
    if (next != f.marks.size())
      internal_error("emit_cpu: " + std::to_string(f.marks.size() - next) + " recorded marks are not in the source");
  }

 private:
  // ---- small spellings ----------------------------------------------------

  std::string banner() const {
    const std::string model =
        o_.model_file.empty() ? std::string("<unknown model>") : o_.model_file;
    return "// GENERATED by sharc from " + model + " for mesh " + mesh_.str() +
           (o_.options.empty() ? "" : " with options " + o_.options) + ". Do not edit.";
  }

  std::string mesh_shape_literal() const {
    std::vector<std::string> names, sizes;
    for (auto& a : mesh_.axes()) {
      names.push_back(quoted(a.name));
      sizes.push_back(std::to_string(a.size));
    }
    return "{" + braced(names) + ", " + braced(sizes) + "}";
  }

  Shape global_shape(const Node& v) const {
    Shape s = v.shape;
    for (size_t d = 0; d < s.size(); ++d) s[d] *= v.sharding->parts(mesh_, d);
    return s;
  }

  static std::vector<int64_t> strides_of(const Shape& s) {
    std::vector<int64_t> st(s.size(), 1);
    for (int d = static_cast<int>(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
    return st;
  }

  // {{"data"}, {}}: a Spec initializer (mesh axes per dimension).
  static std::string spec_literal(const ir::Sharding& s) {
    std::vector<std::string> dims;
    for (auto& d : s.dims) {
      std::vector<std::string> q;
      for (auto& a : d) q.push_back(quoted(a));
      dims.push_back(braced(q));
    }
    return braced(dims);
  }

  // This device's block index along dim d of sharding s: the mixed-radix
  // number of its coordinates on the dimension's axes, as block_index() in
  // partition_per_device. Empty when the dim is not split.
  std::string block_index_expr(const ir::Sharding& s, size_t d) const {
    std::string e;
    for (auto& a : s.dims[d]) {
      if (mesh_.size(a) == 1) continue;
      const std::string coord = "dev." + axis_var_.at(a);
      e = e.empty() ? coord : "(" + e + ") * " + std::to_string(mesh_.size(a)) + " + " + coord;
    }
    return e;
  }

  // The global coordinate where this device's block of v starts along dim d:
  // "0", or e.g. "dev.model_index * 256".
  std::string block_start_expr(const Node& v, size_t d) const {
    const std::string b = block_index_expr(*v.sharding, d);
    if (b.empty()) return "0";
    const std::string t = b.find(' ') == std::string::npos ? b : "(" + b + ")";
    return v.shape[d] == 1 ? t : t + " * " + std::to_string(v.shape[d]);
  }

  // Element offset of this device's block within the global row-major array:
  // the sum over split dims of block start * stride ("0" when unsplit).
  std::string block_offset_expr(const Node& v) const {
    const auto st = strides_of(global_shape(v));
    std::vector<std::string> terms;
    for (size_t d = 0; d < v.shape.size(); ++d) {
      const std::string start = block_start_expr(v, d);
      if (start == "0") continue;
      terms.push_back(st[d] == 1 ? start : start + " * " + std::to_string(st[d]));
    }
    return terms.empty() ? "0" : join(terms, " + ");
  }

  // Pointer to a value's data and its i-th element, by where it lives.
  std::string ptr(int v) const {
    SHARC_CHECK(!var_[v].empty(), "value %" + std::to_string(v) + " has no buffer");
    return (g_[v].op == Op::kParameter ? "dev." : "") + var_[v] + ".data()";
  }
  std::string elem_at(int v, const std::string& index) const {
    return (g_[v].op == Op::kParameter ? "dev." : "") + var_[v] + "[" + index + "]";
  }
  std::string elem(int v) const { return elem_at(v, "i"); }
  std::string elem0(int v) const {
    SHARC_CHECK(!var_[v].empty(), "value %" + std::to_string(v) + " has no buffer");
    return elem_at(v, "0");
  }

  // ---- header pieces -------------------------------------------------------

  using Io = EmissionPlan::Io;
  const std::vector<Io>& ios(bool inputs) const { return inputs ? ep_.inputs : ep_.outputs; }

  // The header's shapes and layouts. The layouts and the tables are built at
  // run time (vectors of strings), so the header only declares them and
  // NAME.cpp defines them (tensor_definitions): an inline variable would be
  // compiled again in every file that includes the header, seconds each for
  // a model with hundreds of parameters.
  std::string tensor_info() const {
    CodeWriter w;
    auto shape_array = [&](const std::string& name, const Shape& s) {
      w.line("inline constexpr std::array<int64_t, " + std::to_string(s.size()) + "> " + name +
             " = " + braced(s) + ";");
    };
    for (const bool inputs : {true, false}) {
      const std::string prefix = inputs ? "kInput_" : "kOutput_";
      w.line(inputs ? "// ---- inputs: global shapes and layouts"
                    : "// ---- outputs: global shapes and layouts");
      for (const Io& io : ios(inputs)) {
        w.line("// \"" + io.name + "\", declared at " + io.loc.str());
        shape_array(prefix + io.field + "_shape", global_shape(g_[io.value]));
        w.line("extern const Spec " + prefix + io.field + "_spec;  // " + spec_literal(*g_[io.value].sharding));
      }
      w.line();
    }
    w.line("// ---- parameters: paths, global shapes and layouts");
    std::vector<std::string> paths;
    for (auto& v : g_.nodes)
      if (v.op == Op::kParameter) paths.push_back(quoted(v.name));
    w.line("inline constexpr std::array<std::string_view, " + std::to_string(paths.size()) +
           "> kParameterPaths = {");
    for (auto& p : paths) w.line("    " + p + ",");
    w.line("};");
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& v = g_.nodes[i];
      if (v.op != Op::kParameter) continue;
      w.line("// \"" + v.name + "\": " + v.init.str() + ", declared at " + v.loc.str() +
             training_note(static_cast<int>(i)));
      shape_array("kParam_" + var_[i] + "_shape", global_shape(v));
      w.line("extern const Spec kParam_" + var_[i] + "_spec;  // " + spec_literal(*v.sharding));
    }
    w.line();
    tables(w, false);
    return w.str();
  }

  // NAME.cpp's definitions of what tensor_info declares.
  std::string tensor_definitions() const {
    CodeWriter w;
    w.line("// The layouts and tables " + o_.header_name + " declares, with their comments.");
    for (const bool inputs : {true, false})
      for (const Io& io : ios(inputs))
        w.line("const Spec " + std::string(inputs ? "kInput_" : "kOutput_") + io.field +
               "_spec = " + spec_literal(*g_[io.value].sharding) + ";");
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (g_.nodes[i].op == Op::kParameter)
        w.line("const Spec kParam_" + var_[i] + "_spec = " + spec_literal(*g_.nodes[i].sharding) + ";");
    tables(w, true);
    return w.str();
  }

  // kParameters, kInputs, kOutputs (sharc::rt::TensorInfo rows) and their
  // checked lookups: what a driver iterates instead of hard-coding shapes.
  // The header declares them and their lookups (`define` false); NAME.cpp
  // defines them.
  void tables(CodeWriter& w, bool define) const {
    auto row = [&](const std::string& name, const Node& v, const SrcLoc& loc) {
      return "{" + quoted(name) + ", \"" + std::string(ir::dtype_name(v.dtype)) + "\", " +
             braced(global_shape(v)) + ", " +
             spec_literal(*v.sharding) + ", " + braced(v.shape) + ", " + quoted(loc.str()) + "}";
    };
    auto table = [&](const std::string& name, const std::vector<std::string>& rows) {
      const std::string type = std::string(define ? "" : "extern ") + "const std::array<sharc::rt::TensorInfo, " +
                               std::to_string(rows.size()) + "> " + name;
      if (!define) {
        w.line(type + ";  // " + std::to_string(rows.size()) + (rows.size() == 1 ? " row" : " rows"));
        return;
      }
      if (rows.empty()) {
        w.line(type + " = {};");
        return;
      }
      w.line(type + " = {{");
      for (const std::string& r : rows) w.line("    " + r + ",");
      w.line("}};");
    };
    std::vector<std::string> params, inputs, outputs;
    for (const Node& v : g_.nodes)
      if (v.op == Op::kParameter) params.push_back(row(v.name, v, v.loc));
    for (const Io& io : ios(true)) inputs.push_back(row(io.name, g_[io.value], io.loc));
    for (const Io& io : ios(false)) outputs.push_back(row(io.name, g_[io.value], io.loc));
    if (!define) {
      w.line("// ---- tables: one row per parameter, input and output");
      w.line("// {name, dtype, global shape, spec, local shape (the block each device holds),");
      w.line("//  declared at}; see runtime/program_info.h. Parameters come in the order the");
      w.line("// model created them, optimizer state included. The rows are in the .cpp.");
    }
    table("kParameters", params);
    table("kInputs", inputs);
    table("kOutputs", outputs);
    if (define) return;
    w.line();
    w.line("// The row of a parameter path or an input or output name; throw");
    w.line("// std::out_of_range naming the ones there are.");
    const std::vector<std::array<std::string, 3>> kinds = {{"parameter", "kParameters", "path"},
                                                           {"input", "kInputs", "name"},
                                                           {"output", "kOutputs", "name"}};
    for (const auto& [kind, tab, arg] : kinds) {
      w.line("inline const sharc::rt::TensorInfo& " + kind + "_info(std::string_view " + arg +
             ") {");
      w.line("  return sharc::rt::lookup_tensor(" + tab + ", " + arg + ", \"" + kind +
             "\", kProgram);");
      w.line("}");
    }
  }

  // "; optimizer state of \"w\"; updated every step" where it applies.
  std::string training_note(int id) const {
    std::string s;
    const Node& v = g_[id];
    if (v.layout_of >= 0) s += "; optimizer state of " + quoted(g_[v.layout_of].name);
    for (auto& u : g_.updates)
      if (u.target == id) s += "; updated every step";
    return s;
  }

  // Inputs::set / Outputs::set: a field by its input or output name, the
  // span's size checked against the table. Inputs have two: float spans for
  // f32 inputs, int32_t spans for i32 ones (`dtype`); each names the other
  // for an input of the other type.
  std::string io_set(bool inputs, ir::DType dtype = ir::DType::kF32) const {
    CodeWriter w(1);
    const std::string kind = inputs ? "input" : "output";
    for (const Io& io : ios(inputs)) {
      w.open("if (name == " + quoted(io.name) + ")");
      const ir::DType t = g_[io.value].dtype;
      if (t != dtype) {
        w.line("throw std::invalid_argument(\"Inputs::set: input \\\"" + io.name + "\\\" is " +
               std::string(ir::dtype_name(t)) + "; pass " + elem_type(t) + " values\");");
        w.close();
        continue;
      }
      w.line("sharc::rt::check_elements(" + kind + "_info(name), values.size(), \"" +
             (inputs ? "Inputs" : "Outputs") + "::set\", \"" + kind + "\");");
      w.line(io.field + " = values.data();");
      w.line("return *this;");
      w.close();
    }
    return w.str();
  }

  // forward() refuses an input or output with neither a global array nor
  // a block for every local device, naming it (rt::check_bound).
  std::string io_checks() const {
    CodeWriter w(1);
    for (const bool inputs : {true, false}) {
      const std::string kind = inputs ? "input" : "output";
      const std::string arg = inputs ? "in" : "out";
      const std::vector<Io>& list = ios(inputs);
      for (size_t k = 0; k < list.size(); ++k)
        w.line("rt::check_bound(" + std::string(inputs ? "kInputs[" : "kOutputs[") + std::to_string(k) + "], " +
               std::to_string(k) + ", " + arg + "." + list[k].field + ", " + arg + ".blocks, local_ranks_, \"" + kind +
               "\", \"" + (inputs ? "Inputs::" : "Outputs::") + list[k].field + "\");");
    }
    return w.str();
  }

  // After a forward() on several processes: every bound global output array
  // gets the blocks the other processes' devices wrote (rt::complete_global).
  std::string complete_outputs() const {
    CodeWriter w(1);
    const std::vector<Io>& list = ios(false);
    for (size_t k = 0; k < list.size(); ++k) {
      const std::string field = "out." + list[k].field;
      w.line("if (" + field + ")");
      w.line("  rt::complete_global(world_, kOutputs[" + std::to_string(k) + "], {" + field + ", " +
             std::to_string(ir::num_elements(global_shape(g_[list[k].value]))) + "}, out.blocks.marks(" +
             std::to_string(k) + "));");
    }
    return w.str();
  }

  // Program::holds_parameter: in a pipeline, a parameter lives on the stages
  // that read it; otherwise on every device.
  std::string holds_parameter() const {
    CodeWriter w(1);
    if (stages_) w.line("const std::vector<int> coords = mesh_shape().coords(rank);");
    for (const Node& v : g_.nodes) {
      if (v.op != Op::kParameter) continue;
      const std::string held =
          stages_ ? held_on(v, "coords[" + std::to_string(mesh_.index(pipe_axis_)) + "]") : "";
      w.line("if (path == " + quoted(v.name) + ") return " + (held.empty() ? "true" : held) + ";");
    }
    return w.str();
  }

  std::string io_fields(bool inputs) const {
    CodeWriter w(2);
    for (const Io& io : ios(inputs))
      w.line((inputs ? "const " + elem_type(g_[io.value].dtype) + "* " : std::string("float* ")) +
             io.field + " = nullptr;  // " +
             ir::shape_str(global_shape(g_[io.value]), g_[io.value].dtype));
    return w.str();
  }

  // ---- source pieces ------------------------------------------------------

  std::string init_specs() const {
    CodeWriter w;
    w.line("// Parameter initialisers: the numbers sharc::init_spec() gives the oracle, so");
    w.line("// every device draws exactly the elements of the global tensor it holds.");
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& v = g_.nodes[i];
      if (v.op != Op::kParameter) continue;
      const Shape gs = global_shape(v);
      const rt::InitSpec s = init_spec(v.init, v.name, gs);
      char key[32];
      std::snprintf(key, sizeof key, "0x%016" PRIx64 "ull", s.key);
      w.line("// \"" + v.name + "\": " + v.init.str() + " over the global " + ir::shape_str(gs) +
             ".");
      w.line("constexpr rt::InitSpec kInit_" + var_[i] + " = {");
      w.line("    .kind = rt::InitKind::" + std::string(init_kind_name(s.kind)) + ",");
      w.line("    .a = " + double_literal(s.a) + ",");
      w.line("    .fan_in = " + std::to_string(s.fan_in) + ",");
      w.line("    .fan_out = " + std::to_string(s.fan_out) + ",");
      w.line("    .key = " + std::string(key) + ",  // init_key(" + quoted(v.name) + ")");
      if (s.row_elems > 0) {
        w.line("    .row_path = " + quoted(v.name) + ",  // row r as layer r's: " +
               quoted(v.name.substr(0, s.row_split) + "<r>" + v.name.substr(s.row_split)));
        w.line("    .row_split = " + std::to_string(s.row_split) + ",");
        w.line("    .row_elems = " + std::to_string(s.row_elems) + ",");
      }
      w.line("};");
    }
    return w.str();
  }

  std::string device_fields() const {
    CodeWriter w(1);
    w.line("// This device's coordinates on the mesh axes.");
    for (auto& a : mesh_.axes())
      w.line("int64_t " + axis_var_.at(a.name) + " = 0;  // on " + quoted(a.name) + ", of " +
             std::to_string(a.size));
    if (!group_var_.empty()) {
      w.line("// Collective groups: the devices that differ from this one only on the listed");
      w.line("// axes, ordered by them (the order decides which block each member holds).");
      for (auto& [axes, var] : group_var_) {
        std::vector<std::string> q;
        for (auto& a : axes) q.push_back(quoted(a));
        w.line("rt::Group " + var + ";  // over " + join(q, ", "));
      }
    }
    w.line("// Parameter shards, persistent.");
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& v = g_.nodes[i];
      if (v.op != Op::kParameter) continue;
      w.line("rt::Buffer " + var_[i] + ";  // " + shape_comment(v) + " of \"" + v.name + "\" " +
             ir::shape_str(global_shape(v)));
    }
    return w.str();
  }

  // The step arena each device reserves: the size the buffer plan's replay
  // of one step reaches (simulate_memory), the largest stage's when
  // pipelined. The runtime places blocks alike and grows the arena after a
  // step that needed more, so a wrong figure costs allocations, not results.
  uint64_t arena_bytes() const {
    if (!stages_) return simulate_memory(g_, plan_).arena_bytes;
    uint64_t most = 0;
    for (const ir::Graph& st : *stages_)
      most = std::max(most, simulate_memory(st, plan_buffers(st)).arena_bytes);
    return most;
  }

  std::string device_setup() const {
    CodeWriter w(2);
    w.line("mem.reserve_arena(" + std::to_string(arena_bytes()) +
           ");  // the step's buffers (rt::StepArena), placed as the buffer plan replays them");
    for (size_t k = 0; k < mesh_.axes().size(); ++k)
      w.line("dev->" + axis_var_.at(mesh_.axes()[k].name) + " = coords[" + std::to_string(k) +
             "];");
    for (auto& [axes, var] : group_var_) {
      std::vector<int> idx;
      for (auto& a : axes) idx.push_back(mesh_.index(a));
      std::vector<std::string> q;
      for (auto& a : axes) q.push_back(quoted(a));
      w.line("dev->" + var + " = rt::make_group(world.mesh(), rank, " + braced(idx) + ");  // " +
             join(q, ", "));
    }
    if (stages_)
      w.line("// Parameter shards live on the pipeline stages that read them.");
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& v = g_.nodes[i];
      if (v.op != Op::kParameter) continue;
      const std::string alloc = "dev->" + var_[i] + " = rt::Buffer(" + std::to_string(ir::num_elements(v.shape)) +
                                ", &mem);  // " + ir::shape_str(v.shape);
      const std::string held =
          stages_ ? held_on(v, "coords[" + std::to_string(mesh_.index(pipe_axis_)) + "]") : "";
      w.line(held.empty() ? alloc : "if (" + held + ") " + alloc);
    }
    return w.str();
  }

  // Pipelined: the condition that a device whose pipe coordinate is `coord`
  // holds parameter v ("" when every device does).
  std::string held_on(const Node& v, const std::string& coord) const {
    if (!stages_) return "";
    const std::vector<int>& on = holders_.at(v.name);
    if (static_cast<int>(on.size()) == mesh_.size(pipe_axis_)) return "";
    std::vector<std::string> terms;
    for (int s : on) terms.push_back(coord + " == " + std::to_string(s));
    return join(terms, " || ");
  }
  std::string held_here(const Node& v) const {
    return stages_ ? held_on(v, "dev." + axis_var_.at(pipe_axis_)) : "";
  }

  std::string init_body() const {
    CodeWriter w(1);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& v = g_.nodes[i];
      if (v.op != Op::kParameter) continue;
      const std::string head = "// " + v.loc.str() + " \"" + v.name + "\": block " +
                               shape_comment(v) + " of the global " +
                               ir::shape_str(global_shape(v));
      const std::string held = held_here(v);
      if (!held.empty()) w.open("if (" + held + ")");
      struct CloseIf {
        CodeWriter& w;
        bool open;
        ~CloseIf() {
          if (open) w.close();
        }
      } close_if{w, !held.empty()};
      if (v.shape.empty()) {
        w.line(head);
        w.line("rt::init_block(kInit_" + var_[i] + ", seed, nullptr, nullptr, nullptr, 0, dev." +
               var_[i] + ".data());");
        continue;
      }
      std::vector<std::string> starts;
      for (size_t d = 0; d < v.shape.size(); ++d) starts.push_back(block_start_expr(v, d));
      w.open("");
      w.line(head);
      w.line("const int64_t local[] = " + braced(v.shape) + ";");
      w.line("const int64_t offset[] = " + braced(starts) + ";");
      w.line("rt::init_block(kInit_" + var_[i] + ", seed, kParam_" + var_[i] +
             "_shape.data(), offset,");
      w.line("               local, " + std::to_string(v.shape.size()) + ", dev." + var_[i] +
             ".data());");
      w.close(v.name);
    }
    return w.str();
  }

  std::string parameter_lookup(bool size) const {
    CodeWriter w(1);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& v = g_.nodes[i];
      if (v.op != Op::kParameter) continue;
      if (size)
        w.line("if (path == " + quoted(v.name) + ") return " +
               std::to_string(ir::num_elements(v.shape)) + ";  // " + ir::shape_str(v.shape));
      else
        w.line("if (path == " + quoted(v.name) + ") return dev." + var_[i] + ".data();");
    }
    return w.str();
  }

  // ---- the SPMD body ------------------------------------------------------

  // One statement of the body (BufferPlan::Stmt): a node, for a fused loop
  // its root, or for an all-reduce bucket its first member.
  using Stmt = BufferPlan::Stmt;

  // The node a statement is attributed to: itself, or for a fused loop whose
  // root has no DSL line (operators record none) the first op in it that has.
  // Its sharding is the root's: the loop writes the root's buffer.
  Node anchor(const Stmt& s) const {
    Node a = g_[s.node];
    if (a.loc.known()) return a;
    for (int t : s.tree)
      if (g_[t].loc.known()) {
        a.loc = g_[t].loc;
        a.name = g_[t].name;
        break;
      }
    return a;
  }

  // Statements are grouped into sections by layer label ("dot1"), or by DSL
  // line for ops outside any module. Returns {key, title}.
  std::pair<std::string, std::string> section(const Node& v) const {
    if (v.op == Op::kInput) return {"\x01inputs", "inputs"};
    const std::string where = v.loc.known() ? v.loc.str() : "";
    if (!v.name.empty()) return {v.name, where.empty() ? v.name : v.name + " (" + where + ")"};
    return {where, std::string(ir::op_name(v.op)) + (where.empty() ? "" : " (" + where + ")")};
  }

  static std::string rule(const std::string& title) {
    const int width = 69 - static_cast<int>(title.size());  // 80 columns at indent 1
    return "// ---- " + title + " " + std::string(std::max(4, width), '-');
  }

  // "// <loc> <label>: <in shardings> -> <out sharding> => <what>"
  std::string describe(const Node& v, const std::vector<int>& reads,
                       const std::string& what) const {
    std::vector<std::string> ins;
    for (int r : reads) {
      const std::string s = g_[r].sharding->str();
      if (std::find(ins.begin(), ins.end(), s) == ins.end()) ins.push_back(s);
    }
    std::string change =
        ins.empty() ? v.sharding->str() : join(ins, ", ") + " -> " + v.sharding->str();
    return "// " + loc_prefix(v) + change + " => " + what;
  }

  // The runtime's buffer and element types of a value's dtype.
  static std::string buf_type(ir::DType t) {
    return t == ir::DType::kF32 ? "rt::Buffer" : t == ir::DType::kBF16 ? "rt::BufferBF16" : "rt::BufferI32";
  }
  static std::string elem_type(ir::DType t) {
    return t == ir::DType::kF32 ? "float" : t == ir::DType::kBF16 ? "rt::bf16" : "int32_t";
  }
  // An f32 expression stored into an element of type t (bf16: rounded to
  // nearest even, as every op's result is).
  static std::string stored(ir::DType t, const std::string& e) {
    if (t == ir::DType::kBF16) return "rt::bf16(" + e + ")";
    if (t == ir::DType::kI32) return "static_cast<int32_t>(" + e + ")";
    return e;
  }

  // A statement's result buffer: from the device's step arena, zeroed unless
  // the statement writes every element (`writes_all`); a parameter's new
  // value outlives the step (rt::persistent), so it is not placed there.
  // Every buffer of the step is a member of the step's struct (split_step),
  // so this assigns it; a parameter's buffer updated in place is a reference
  // member, and gets a comment. Records v in declared_.
  std::string declare(int v, bool writes_all = false) {
    declared_.push_back(v);
    if (const int param = plan_.in_place_of[v]; param >= 0)
      return "// " + var_[v] + " is dev." + var_[param] + " (a reference member): " + shape_comment(g_[v]) +
             ", the new \"" + g_[param].name + "\" computed in place";
    std::string how;
    if (writes_all) how += ", rt::uninitialized";
    if (plan_.is_update_value[v]) how += ", rt::persistent";
    return var_[v] + " = " + buf_type(g_[v].dtype) + "(" + std::to_string(ir::num_elements(g_[v].shape)) + ", &mem" +
           how + ");  // " + shape_comment(g_[v]);
  }

  static std::string unary_expr(Op op, const std::string& x) {
    switch (op) {
      case Op::kNeg:
        return "-" + x;
      case Op::kRelu:
        return "rt::relu(" + x + ")";
      case Op::kGelu:
        return "rt::gelu(" + x + ")";
      case Op::kTanh:
        return "rt::tanh(" + x + ")";
      case Op::kExp:
        return "rt::exp(" + x + ")";
      case Op::kLog:
        return "std::log(" + x + ")";
      case Op::kSqrt:
        return "std::sqrt(" + x + ")";
      case Op::kSin:
        return "std::sin(" + x + ")";
      case Op::kCos:
        return "std::cos(" + x + ")";
      case Op::kAbs:
        return "std::abs(" + x + ")";
      case Op::kSigmoid:
        return "rt::sigmoid(" + x + ")";
      case Op::kErf:
        return "std::erf(" + x + ")";
      case Op::kLog1p:
        return "std::log1p(" + x + ")";
      case Op::kExpm1:
        return "std::expm1(" + x + ")";
      case Op::kConvert:
        return x;  // the store (or the scalar's rounding) gives the node's type
      default:
        internal_error(std::string("not a unary op: ") + ir::op_name(op));
    }
  }

  static std::string binary_expr(Op op, const std::string& a, const std::string& b) {
    switch (op) {
      case Op::kAdd:
        return a + " + " + b;
      case Op::kSub:
        return a + " - " + b;
      case Op::kMul:
        return a + " * " + b;
      case Op::kDiv:
        return a + " / " + b;
      case Op::kPow:
        return "std::pow(" + a + ", " + b + ")";
      case Op::kMax:
        return "std::max(" + a + ", " + b + ")";
      case Op::kMin:
        return "std::min(" + a + ", " + b + ")";
      case Op::kGreater:
        return "(" + a + " > " + b + " ? 1.0f : 0.0f)";
      case Op::kEqual:
        return "(" + a + " == " + b + " ? 1.0f : 0.0f)";
      default:
        internal_error(std::string("not a binary op: ") + ir::op_name(op));
    }
  }

  // A fused elementwise loop: inlined nodes become named scalars (one
  // statement each, so float rounding matches the interpreter's per-op
  // buffers), the root is stored.
  void emit_fused(CodeWriter& w, const Stmt& s) {
    const Node& root = g_[s.node];
    std::vector<std::string> ops;
    for (int t : s.tree) ops.push_back(ir::op_name(g_[t].op));
    std::string what = (s.tree.size() > 1 ? "fused " : "") + join(ops, ", ");
    if (!s.stores.empty()) {
      std::vector<std::string> kept;
      for (int t : s.stores) kept.push_back(var_[t]);
      what += "; also keeps " + join(kept, ", ");
    }
    w.line(describe(anchor(s), s.reads, what));
    w.line(declare(s.node, /*writes_all=*/true));
    for (int t : s.stores) w.line(declare(t, /*writes_all=*/true));
    std::map<int, std::string> scalar;
    auto operand = [&](int a) {
      if (scalar.count(a)) return scalar[a];
      const Node& x = g_[a];
      // A bf16 constant holds its value rounded to bf16.
      if (x.op == Op::kConstant)
        return float_literal(x.dtype == ir::DType::kBF16
                                 ? rt::round_to_bf16(static_cast<float>(x.scalar))
                                 : x.scalar);
      return x.dtype == ir::DType::kBF16 ? "static_cast<float>(" + elem(a) + ")" : elem(a);
    };
    // Broadcasts inlined into the loop (BufferPlan): a one-element operand
    // is read once before the loop; any other is read at the element of the
    // operand that output element i repeats.
    int hoisted = 0;
    std::vector<std::string> before;
    for (int t : s.tree) {
      const Node& v = g_[t];
      if (v.op != Op::kBroadcast) continue;
      const int a = v.args[0];
      const Node& x = g_[a];
      if (x.op == Op::kConstant) {
        scalar[t] = operand(a);
      } else if (ir::num_elements(x.shape) == 1) {
        const std::string name = var_[s.node] + "_b" + std::to_string(hoisted++);
        const std::string e = elem0(a);
        before.push_back("const float " + name + " = " +
                         (x.dtype == ir::DType::kBF16 ? "static_cast<float>(" + e + ")" : e) +
                         ";  // broadcast" + (v.loc.known() ? " at " + v.loc.str() : ""));
        scalar[t] = name;
      }
    }
    // A broadcast read in the loop: per operand dimension (not of size 1)
    // the output dimension it runs along; runs of operand dimensions that
    // follow consecutive output dimensions read as one index term
    // ((i / inner) % extent) * scale.
    struct Term {
      int64_t inner, extent, scale;
      bool wraps;  // the run does not start at output dimension 0
    };
    auto broadcast_terms = [&](const Node& v) {
      const Node& x = g_[v.args[0]];
      const std::vector<int64_t> ostride = strides_of(v.shape), istride = strides_of(x.shape);
      std::vector<Term> terms;
      for (size_t d = 0; d < x.shape.size();) {
        if (x.shape[d] == 1) {
          ++d;
          continue;
        }
        // Extend the run over operand dims that follow consecutive output
        // dims, stepping over size-1 dims on both sides: they index nothing
        // ([16,1,64,1] over [16,1,64,64] is one run of 1024 rows).
        size_t last = d;
        for (size_t e = d + 1; e < x.shape.size(); ++e) {
          if (x.shape[e] == 1) continue;
          bool gap_is_ones = v.ints[e] > v.ints[last];
          for (int o = v.ints[last] + 1; o < v.ints[e] && gap_is_ones; ++o)
            gap_is_ones = v.shape[o] == 1;
          if (!gap_is_ones) break;
          last = e;
        }
        // Operand dims [d, last] (size-1 ones aside) follow output dims
        // ints[d] .. ints[last].
        int64_t extent = 1;
        for (size_t k = d; k <= last; ++k) extent *= x.shape[k];
        bool wraps = false;  // an output dim of more than one element comes first
        for (int o = 0; o < v.ints[d]; ++o) wraps = wraps || v.shape[o] > 1;
        terms.push_back({ostride[v.ints[last]], extent, istride[last], wraps});
        d = last + 1;
      }
      return terms;
    };
    // The loop runs as `o` blocks of `split` elements when every broadcast it
    // reads either repeats a row of `split` (bias[i % split] -> bias[j]) or
    // holds one value per block (mean[i / split] -> mean[o]): then the inner
    // loop reads only unit-stride or invariant operands and vectorises.
    int64_t split = 0;
    bool splittable = true;
    for (int t : s.tree) {
      const Node& v = g_[t];
      if (v.op != Op::kBroadcast || scalar.count(t)) continue;
      const std::vector<Term> terms = broadcast_terms(v);
      int64_t n = 0;
      if (terms.size() == 1 && terms[0].scale == 1 && terms[0].inner == 1 && terms[0].wraps)
        n = terms[0].extent;  // a row repeated
      else if (terms.size() == 1 && terms[0].scale == 1 && terms[0].inner > 1 && !terms[0].wraps)
        n = terms[0].inner;  // one value per block
      if (n <= 1 || (split != 0 && n != split)) splittable = false;
      split = n;
    }
    if (s.tree.size() == 1 || split == 0 || ir::num_elements(root.shape) % split != 0)
      splittable = false;
    auto broadcast_read = [&](const Node& v) {
      const Node& x = g_[v.args[0]];
      const std::vector<Term> terms = broadcast_terms(v);
      std::vector<std::string> parts;
      for (const Term& t : terms) {
        std::string idx;
        if (splittable) {
          idx = t.wraps ? "j" : "o";
        } else {
          idx = t.inner == 1 ? "i" : "i / " + std::to_string(t.inner);
          if (t.wraps) idx = "(" + idx + ") % " + std::to_string(t.extent);
        }
        parts.push_back(t.scale == 1 ? idx : "(" + idx + ") * " + std::to_string(t.scale));
      }
      const std::string e = elem_at(v.args[0], parts.empty() ? "0" : join(parts, " + "));
      return x.dtype == ir::DType::kBF16 ? "static_cast<float>(" + e + ")" : e;
    };
    auto expr = [&](int t) {
      const Node& v = g_[t];
      if (v.op == Op::kBroadcast) return broadcast_read(v);
      if (ir::is_ternary(v.op))
        return "rt::select(" + operand(v.args[0]) + ", " + operand(v.args[1]) + ", " +
               operand(v.args[2]) + ")";
      return ir::is_unary(v.op) ? unary_expr(v.op, operand(v.args[0]))
                                : binary_expr(v.op, operand(v.args[0]), operand(v.args[1]));
    };
    const int64_t count = ir::num_elements(root.shape);
    // A loop of rt::kParallelMin elements or more runs over the device's
    // team (rt::parallel_for, runtime/team.h): the loop becomes a lambda
    // over [lo, hi) of its outer index.
    const bool parallel = count >= rt::kParallelMin;
    const int64_t outer = splittable ? count / split : count;
    const std::string lo = parallel ? "lo" : "0", hi = parallel ? "hi" : std::to_string(outer);
    const std::string head = "for (int64_t i = " + lo + "; i < " + hi + "; ++i)";
    for (const std::string& line : before) w.line(line);
    if (parallel)
      w.open("rt::parallel_for(" + std::to_string(outer) + ", /*grain=*/" + (splittable ? "1" : "64") +
             ", [&](int64_t lo, int64_t hi)");
    if (s.tree.size() == 1) {
      w.line(head + " " + var_[s.node] + "[i] = " + stored(root.dtype, expr(s.node)) + ";");
      if (parallel) (--w).line("});");
      return;
    }
    // The vectorised loop says its buffers do not overlap (runtime/elementwise.h).
    const bool independent = count > 1;
    if (splittable) {
      const std::string sp = std::to_string(split);
      w.open("for (int64_t o = " + lo + "; o < " + hi + "; ++o)");
      if (independent) w.line("SHARC_INDEPENDENT_ITERATIONS");
      w.open("for (int64_t j = 0; j < " + sp + "; ++j)");
      w.line("const int64_t i = o * " + sp + " + j;");
    } else {
      if (independent) w.line("SHARC_INDEPENDENT_ITERATIONS");
      w.open(head);
    }
    int k = 0;
    for (int t : s.tree) {
      const Node& v = g_[t];
      if (scalar.count(t)) continue;  // a hoisted broadcast
      const std::string where = v.loc.known() ? "  // " + v.loc.str() + " " + ir::op_name(v.op)
                                              : "  // " + std::string(ir::op_name(v.op));
      if (t == s.node) {
        w.line(var_[s.node] + "[i] = " + stored(root.dtype, expr(t)) + ";" + where);
      } else {
        // A bf16 op's result is rounded where it is made, as if stored.
        const std::string name = "v" + std::to_string(k++);
        // An i32 op's result is truncated to an integer: what a store does.
        const std::string e =
            v.dtype == ir::DType::kBF16 ? "rt::round_to_bf16(" + expr(t) + ")"
            : v.dtype == ir::DType::kI32 ? "static_cast<float>(static_cast<int32_t>(" + expr(t) + "))"
                                         : expr(t);
        w.line("const float " + name + " = " + e + ";" + where);
        scalar[t] = name;
        // A kept value is also stored, for the readers after this loop.
        if (plan_.kept[t])
          w.line(var_[t] + "[i] = " + stored(v.dtype, name) + ";");
      }
    }
    if (splittable) w.close("");
    w.close("fused loop of " + var_[s.node]);
    if (parallel) (--w).line("});");
  }

  // Local dot_general exactly as execute.cpp's local_dot() (local_dot_layout):
  // one batched GEMM, transposed operands passed with BLAS's transpose flags,
  // operands in any other order copied first.
  void emit_dot(CodeWriter& w, const Stmt& s) {
    const Node& v = g_[s.node];
    const int l = v.args[0], r = v.args[1];
    w.line(describe(v, s.reads, "dot " + ir::dot_dims_str(v.dot)));
    w.line(declare(s.node, /*writes_all=*/true));
    emit_local_dot(w, v.dot, g_[l].shape, ptr(l), g_[r].shape, ptr(r), ptr(s.node), var_[s.node],
                   v.dtype);
  }

  // The statements of local_dot() in execute.cpp on operands of shapes ls, rs
  // at the pointer expressions lp, rp, writing out_expr; transposed copies
  // are named after `stem` and freed after the GEMM.
  void emit_local_dot(CodeWriter& w, const ir::DotDims& d, const Shape& ls, std::string lp,
                      const Shape& rs, std::string rp, const std::string& out_expr,
                      const std::string& stem, ir::DType dtype) {
    const LocalDotLayout layout = local_dot_layout(d, ls, rs);
    const int64_t B = layout.B, M = layout.M, N = layout.N, K = layout.K;
    std::vector<std::string> temps;
    auto transposed = [&](const Shape& shape, const std::string& x, const std::vector<int>& perm,
                          const std::string& role) {
      const std::string t = locals_.user(stem + "_" + role);
      Shape moved;
      for (int p : perm) moved.push_back(shape[p]);
      w.line(buf_type(dtype) + " " + t + "(" + std::to_string(ir::num_elements(shape)) +
             ", &mem, rt::uninitialized);  // " +
             ir::shape_str(moved, dtype) + ": " + role + " as " +
             (role == "lhs" ? "(batch, free, contract)" : "(batch, contract, free)"));
      w.line("rt::transpose(" + x + ", " + braced(shape) + ", " + braced(perm) + ", " + t +
             ".data());");
      temps.push_back(t);
      return t + ".data()";
    };
    if (layout.transpose_lhs) lp = transposed(ls, lp, layout.lhs_perm, "lhs");
    if (layout.transpose_rhs) rp = transposed(rs, rp, layout.rhs_perm, "rhs");
    w.line("rt::gemm(/*batch=*/" + std::to_string(B) + ", /*M=*/" + std::to_string(M) + ", /*N=*/" +
           std::to_string(N) + ", /*K=*/" + std::to_string(K) + ",");
    w.line("         " + lp + (layout.trans_lhs ? ", /*trans_a=*/true, " : ", false, ") + rp +
           (layout.trans_rhs ? ", /*trans_b=*/true, " : ", false, ") + out_expr + ");");
    for (auto& t : temps) w.line(t + " = " + buf_type(dtype) + "();");
  }

  // A RingDot exactly as execute.cpp's ring_dot() runs it (ring_plan()
  // decides the shapes): one loop over the ring's steps; in each, the
  // ppermutes start before the GEMMs and are waited for after them. Half 0
  // of every block travels right (to p + 1), half 1 (bidirectional) left.
  void emit_ring_dot(CodeWriter& w, const Stmt& s) {
    const Node& v = g_[s.node];
    const int id = s.node;
    const RingPlan plan = ring_plan(v, g_[v.args[0]].shape, g_[v.args[1]].shape,
                                    static_cast<int>(mesh_.size(v.axes)));
    const int H = plan.halves;
    const std::string n = std::to_string(plan.n);
    const std::string axis = v.axes[0];
    const std::string label = quoted(statement_label(v));
    const RingStepCost cost = ring_step_cost(g_, v, plan.n);
    const char* role[2] = {"lhs", "rhs"};
    std::string what = "ring_dot " + ir::dot_dims_str(v.dot) + " ";
    what += plan.gather ? std::string("gather=") + role[plan.moving] : std::string("scatter");
    what += " dim=" + std::to_string(v.dim) + " over (" + axis + "), " +
            ir::ring_direction_name(v.ring.direction);
    w.line(describe(v, s.reads, what));
    w.line(declare(id));
    w.open("");
    const std::string grp = group(v);
    const std::string p = locals_.user("p"), k = locals_.user("k");
    const std::string piece = std::to_string(plan.step_result_count());
    const std::string operand[2] = {ptr(v.args[0]), ptr(v.args[1])};
    if (plan.gather) {
      w.line("// " + std::string(role[plan.moving]) + " is gathered along dim " +
             std::to_string(v.dim) + " over \"" + axis +
             "\" by passing its blocks around the ring of " + n + ":");
      w.line("// at step k this device multiplies the block it holds while the block travels on.");
    } else {
      w.line("// The result is reduce-scattered along dim " + std::to_string(v.dim) + " over \"" +
             axis + "\" around the ring of " + n + ": at step k this");
      w.line("// device adds its partial of a block to the sum arriving for it, and passes it on.");
    }
    w.line("const int " + p + " = " + grp + ".position;  // this device's place in the ring");
    std::string perm[2];
    perm[0] = locals_.user("to_right");
    w.line("const rt::Permutation " + perm[0] + " = rt::ring_shift(" + n + ", +1);  // send to " +
           p + " + 1, receive from " + p + " - 1");
    if (H == 2) {
      perm[1] = locals_.user("to_left");
      w.line("const rt::Permutation " + perm[1] + " = rt::ring_shift(" + n + ", -1);  // send to " +
             p + " - 1, receive from " + p + " + 1");
    }
    // The sliced operand's piece for piece index `i`: a pointer, or a copy.
    std::string slice_buf;
    if (plan.sliced >= 0 && !plan.slice_contiguous) {
      slice_buf = locals_.user(std::string(role[plan.sliced]) + "_piece");
      w.line(buf_type(v.dtype) + " " + slice_buf + "(" +
             std::to_string(plan.step_operand_count(plan.sliced)) + ", &mem);  // " +
             ir::shape_str(plan.step_operand[plan.sliced], v.dtype) + ": a piece of " + role[plan.sliced]);
    }
    auto sliced_piece = [&](const std::string& i) {
      const std::string x = operand[plan.sliced];
      if (plan.slice_contiguous)
        return x + " + " + (H == 1 ? i : "(" + i + ")") + " * " +
               std::to_string(plan.step_operand_count(plan.sliced));
      w.line("rt::slice_block(" + x + ", " + braced(plan.operand[plan.sliced]) + ", /*dim=*/" +
             std::to_string(plan.slice_dim) + ", " + std::to_string(plan.pieces()) + ", " + i +
             ", " + slice_buf + ".data());");
      return slice_buf + ".data()";
    };
    std::string piece_buf;
    if (plan.gather && !plan.out_contiguous) {
      piece_buf = locals_.user("result_piece");
      w.line(buf_type(v.dtype) + " " + piece_buf + "(" + piece + ", &mem);  // " +
             ir::shape_str(plan.step_result, v.dtype) + ": one step's piece of the result");
    }
    // "b0" at half 0, "b1 * 2 + 1" at half 1: the piece index of block b.
    auto piece_index = [&](const std::string& b, int h) {
      return H == 1 ? b : b + " * 2" + (h ? " + 1" : "");
    };
    // Names of the halves' variables: cur0, cur1; just cur one way.
    auto suffix = [&](int h) { return H == 2 ? std::to_string(h) : std::string(); };
    const char* way[2] = {"right", "left"};
    std::vector<std::string> blk(H), recv(H);
    for (int h = 0; h < H; ++h) recv[h] = locals_.user("recv" + suffix(h));

    if (plan.gather) {
      const int m = plan.moving;
      const std::string count = std::to_string(plan.step_operand_count(m));
      std::vector<std::string> cur(H), next(H);
      for (int h = 0; h < H; ++h) {
        cur[h] = locals_.user("cur" + suffix(h));
        next[h] = locals_.user("next" + suffix(h));
        w.line(buf_type(v.dtype) + " " + cur[h] + "(" + count + ", &mem), " + next[h] + "(" + count +
               ", &mem);  // " + ir::shape_str(plan.step_operand[m], v.dtype) + ": the " + role[m] +
               " piece held / arriving" +
               (H == 2 ? std::string(", half ") + std::to_string(h) + " (travels " + way[h] + ")"
                       : ""));
        if (H == 1)
          w.line("rt::copy(" + operand[m] + ", " + cur[h] + ".data(), " + count +
                 ");  // this device's block");
        else
          w.line("rt::slice_block(" + operand[m] + ", " + braced(plan.operand[m]) + ", /*dim=*/" +
                 std::to_string(plan.move_dim) + ", 2, " + std::to_string(h) + ", " + cur[h] +
                 ".data());  // half " + std::to_string(h) + " of this device's block");
      }
      w.open("for (int " + k + " = 0; " + k + " < " + n + "; ++" + k + ")");
      for (int h = 0; h < H; ++h) {
        blk[h] = locals_.user("b" + suffix(h));
        const std::string expr = h == 0 ? "(" + p + " - " + k + " + " + n + ") % " + n
                                        : "(" + p + " + " + k + ") % " + n;
        w.line("const int " + blk[h] + " = " + expr + ";  // block held" +
               (H == 2 ? " by half " + std::to_string(h) : "") + ": device " + blk[h] +
               "'s, passed along from the " + way[1 - h]);
      }
      w.line("rt::PendingRecv " + join(recv, ", ") + ";");
      w.open("if (" + k + " + 1 < " + n + ")");
      w.line("// the last step sends nothing: n - 1 transfers, the all_gather's bytes");
      for (int h = 0; h < H; ++h)
        w.line(recv[h] + " = comm.ppermute_start(" + cur[h] + ".data(), " + next[h] + ".data(), " +
               count + ", " + grp + ", " + perm[h] + ");  // block " + blk[h] + " on to the " +
               way[h]);
      w.close();
      w.line("timeline.op(" + label + ", " + cost_literal(cost.gemm) + ");");
      record_mark(EmittedMark::Kind::kRingGemm, id, cost.gemm);
      for (int h = 0; h < H; ++h) {
        const std::string i = piece_index(blk[h], h);
        std::string step[2];
        step[m] = cur[h] + ".data()";
        step[1 - m] = plan.sliced >= 0 ? sliced_piece(i) : operand[1 - m];
        const std::string dst = plan.out_contiguous
                                    ? ptr(id) + " + " + (H == 1 ? i : "(" + i + ")") + " * " + piece
                                    : piece_buf + ".data()";
        emit_local_dot(w, v.dot, plan.step_operand[0], step[0], plan.step_operand[1], step[1], dst,
                       var_[id], v.dtype);
        if (!plan.out_contiguous)
          w.line("rt::place_block(" + piece_buf + ".data(), " + braced(plan.result) + ", /*dim=*/" +
                 std::to_string(plan.out_dim) + ", " + std::to_string(plan.out_parts) + ", " + i +
                 ", " + ptr(id) + ");");
      }
      w.open("if (" + k + " + 1 < " + n + ")");
      for (int h = 0; h < H; ++h) {
        w.line("comm.ppermute_wait(" + recv[h] + ");");
        w.line("std::swap(" + cur[h] + ", " + next[h] + ");");
      }
      w.close();
      w.close("ring step");
      w.close("ring_dot " + var_[id]);
      return;
    }

    // kScatter: acc_h is the running sum of half h, in place in the result
    // when its block is a contiguous run of it.
    const int sl = plan.sliced;
    std::vector<std::string> acc(H), part(H), incoming(H);
    for (int h = 0; h < H; ++h) {
      const std::string hs = std::to_string(h);
      part[h] = locals_.user("part" + suffix(h));
      incoming[h] = locals_.user("incoming" + suffix(h));
      w.line(buf_type(v.dtype) + " " + part[h] + "(" + piece + ", &mem), " + incoming[h] + "(" + piece +
             ", &mem);  // " + ir::shape_str(plan.step_result, v.dtype) +
             ": this device's partial / the sum so far from the " + way[1 - h] +
             (H == 2 ? ", half " + hs : ""));
      acc[h] = locals_.user("acc" + suffix(h));
      if (plan.out_contiguous) {
        w.line(elem_type(v.dtype) + "* " + acc[h] + " = " + ptr(id) + (h ? " + " + piece : "") +
               ";  // the running sum" + (H == 2 ? " of half " + hs : "") + ", in place");
      } else {
        const std::string buf = locals_.user("sum" + suffix(h));
        w.line(buf_type(v.dtype) + " " + buf + "(" + piece + ", &mem);");
        w.line(elem_type(v.dtype) + "* " + acc[h] + " = " + buf + ".data();  // the running sum of half " + hs);
      }
    }
    w.open("for (int " + k + " = 0; " + k + " < " + n + "; ++" + k + ")");
    for (int h = 0; h < H; ++h) {
      blk[h] = locals_.user("c" + suffix(h));
      const std::string expr = h == 0 ? "(" + p + " - " + k + " - 1 + " + n + ") % " + n
                                      : "(" + p + " + " + k + " + 1) % " + n;
      w.line("const int " + blk[h] + " = " + expr + ";  // block summed" +
             (H == 2 ? " by half " + std::to_string(h) : "") + " this step (" + p +
             "'s own at the last)");
    }
    w.line("rt::PendingRecv " + join(recv, ", ") + ";");
    w.open("if (" + k + " > 0)");
    w.line("// last step's sum on, while this step's block's sum so far arrives");
    for (int h = 0; h < H; ++h)
      w.line(recv[h] + " = comm.ppermute_start(" + acc[h] + ", " + incoming[h] + ".data(), " +
             piece + ", " + grp + ", " + perm[h] + ");  // to the " + way[h]);
    w.close();
    w.line("timeline.op(" + label + ", " + cost_literal(cost.gemm) + ");");
    record_mark(EmittedMark::Kind::kRingGemm, id, cost.gemm);
    for (int h = 0; h < H; ++h) {
      std::string step[2];
      step[sl] = sliced_piece(piece_index(blk[h], h));
      step[1 - sl] = operand[1 - sl];
      emit_local_dot(w, v.dot, plan.step_operand[0], step[0], plan.step_operand[1], step[1],
                     "(" + k + " == 0 ? " + acc[h] + " : " + part[h] + ".data())", var_[id],
                     v.dtype);
    }
    w.open("if (" + k + " > 0)");
    for (int h = 0; h < H; ++h) {
      w.line("comm.ppermute_wait(" + recv[h] + ");");
      w.line("timeline.op(" + label + ", " + cost_literal(cost.add) + ");");
      record_mark(EmittedMark::Kind::kRingAdd, id, cost.add);
      const std::string sum =
          v.dtype == ir::DType::kBF16
              ? "rt::bf16(static_cast<float>(" + part[h] + "[i]) + static_cast<float>(" +
                    incoming[h] + "[i]))"
              : part[h] + "[i] + " + incoming[h] + "[i]";
      w.line("for (int64_t i = 0; i < " + piece + "; ++i) " + acc[h] + "[i] = " + sum + ";");
    }
    w.close();
    w.close("ring step");
    if (!plan.out_contiguous)
      for (int h = 0; h < H; ++h)
        w.line("rt::place_block(" + acc[h] + ", " + braced(plan.result) + ", /*dim=*/" +
               std::to_string(plan.out_dim) + ", " + std::to_string(plan.out_parts) + ", " +
               std::to_string(h) + ", " + ptr(id) + ");");
    w.close("ring_dot " + var_[id]);
  }

  std::string group(const Node& v) const { return "dev." + group_var_.at(v.axes); }

  // random_uniform exactly as execute.cpp: the stream key mixes the node's key
  // (a hash of its DSL site) with the seed operand at run time, and element
  // e of this block draws from its GLOBAL flat index (rt::uniform_at), so
  // every mesh gives the same values. One rt::uniform_fill per run that is
  // contiguous both here and in the global tensor: over dimensions c.. where
  // every dimension after c is whole on this device (c = rank - 1 at worst).
  void emit_random_uniform(CodeWriter& w, const Stmt& s) {
    const Node& v = g_[s.node];
    const int id = s.node;
    const Shape gs = global_shape(v);
    const auto gst = strides_of(gs), lst = strides_of(v.shape);
    char key[32];
    std::snprintf(key, sizeof key, "0x%016" PRIx64 "ull", v.key);
    std::string site = key;
    if (scanned(v)) {
      // Each layer draws its own stream: its key from a table by layer.
      const std::string table = "kLayerKeys_" + base_name(var_[id]);
      auto& keys = layer_keys_[table];
      keys.resize(static_cast<size_t>(g_.repeats[v.repeat].length));
      keys[static_cast<size_t>(v.iteration)] = key;
      site = table + "[" + iter_int(v, v.iteration) + "]";
    }
    w.line(describe(v, s.reads, "random_uniform over the global " + ir::shape_str(gs)));
    w.line(declare(id, /*writes_all=*/true));
    w.open("");
    w.line("const uint64_t key = rt::random_stream_key(" + site + ", " + elem0(v.args[0]) + ");  // (site, seed)");
    std::vector<std::string> local, global;
    int loops = 0;
    const size_t rank = v.shape.size();
    size_t c = rank ? rank - 1 : 0;
    while (c > 0 && v.shape[c] == gs[c]) --c;
    int64_t run_count = 1;
    for (size_t d = c; d < rank; ++d) run_count *= v.shape[d];
    for (size_t d = 0; d <= c && d < rank; ++d) {
      std::string idx;
      if (v.shape[d] > 1 && d < c) {
        idx = "i" + std::to_string(d);
        w.open("for (int64_t " + idx + " = 0; " + idx + " < " + std::to_string(v.shape[d]) +
               "; ++" + idx + ")");
        ++loops;
        local.push_back(lst[d] == 1 ? idx : idx + " * " + std::to_string(lst[d]));
      }
      const std::string start = block_start_expr(v, d);
      std::string at = start == "0" ? idx : idx.empty() ? start : "(" + start + " + " + idx + ")";
      if (!at.empty()) global.push_back(gst[d] == 1 ? at : at + " * " + std::to_string(gst[d]));
    }
    const std::string l = local.empty() ? "0" : join(local, " + ");
    const std::string g = global.empty() ? "0" : join(global, " + ");
    w.line("rt::uniform_fill(key, " + (g == "0" ? g : "static_cast<uint64_t>(" + g + ")") + ", " +
           std::to_string(run_count) +
           ", " + ptr(id) +
           (l == "0" ? "" : " + " + l) + ");");
    for (int k = 0; k < loops; ++k) w.close();
    w.close("random_uniform " + var_[id]);
  }

  // ---- scanned layers -----------------------------------------------------
  //
  // A scanned Layers (dsl/layers.h) computes every layer with the same code
  // up to which row of the stacked parameters it reads. Its values are
  // elements of member arrays indexed by the layer (emission_plan.h,
  // iteration_marker), its rows' offsets and random streams are marked with
  // the layer they depend on, and fold_layers writes the layers' statements
  // once, as a part called in a loop over l, when the text of every layer's
  // statements is the same relative to its layer (checked, not assumed).

  bool scanned(const Node& v) const {
    return v.repeat >= 0 && v.iteration >= 0 && g_.repeats[v.repeat].scan;
  }
  // A slice / add_slice of a scanned layer's own row of a stacked value.
  bool layer_row(const Node& v) const {
    return scanned(v) && (v.op == Op::kSlice || v.op == Op::kAddSlice) && v.ints[0] == 0 &&
           v.ints[1] == v.iteration && g_[v.args[0]].shape[0] == g_.repeats[v.repeat].length;
  }
  // `value` (= layer + k) as text: a layer-relative marker in a layer's row
  // statement, else the number.
  std::string iter_int(const Node& v, int64_t value, int64_t k = 0) const {
    if (!(layer_row(v) || (scanned(v) && v.op == Op::kRandomUniform)) || value - k != v.iteration)
      return std::to_string(value);
    return layer_ref(v, k);
  }
  // The layer of a scanned layer's statement, as a marker ("l" in its loop).
  static std::string layer_ref(const Node& v, int64_t k = 0) {
    return "\x03" + std::to_string(v.iteration) + ":" + std::to_string(k) + "\x04";
  }
  // Whether a value's name is an element of a scanned layer's member array,
  // and that name without its layer marker.
  static bool per_layer(const std::string& var) { return var.find('\x01') != std::string::npos; }
  static std::string base_name(const std::string& var) { return var.substr(0, var.find('\x01')); }

  // Rewrites the layer markers of `text`, written for layer `at`: relative
  // to the loop variable l (relative = true), or as the literal layers.
  // Lines that free a value from outside the layers (marked \x05) are
  // dropped when relative (fold_layers re-adds them guarded), else kept.
  static std::string spell_layers(const std::string& text, int at, bool relative) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      const char c = text[i];
      if (c == '\x05') {
        const size_t end = text.find('\n', i);
        if (relative) {  // the whole line: its indentation, and the newline before it
          while (!out.empty() && out.back() == ' ') out.pop_back();
          if (!out.empty() && out.back() == '\n') out.pop_back();
          i = end == std::string::npos ? text.size() : end;
        } else {
          ++i;
        }
        continue;
      }
      if (c != '\x01' && c != '\x03') {
        out += c;
        ++i;
        continue;
      }
      const size_t end = text.find(c == '\x01' ? '\x02' : '\x04', i);
      const std::string inner = text.substr(i + 1, end - i - 1);
      i = end + 1;
      const size_t colon = inner.find(':');
      const int j = std::stoi(inner.substr(0, colon));
      const int k = colon == std::string::npos ? 0 : std::stoi(inner.substr(colon + 1));
      const int off = relative ? j - at + k : j + k;
      std::string e = relative ? (off == 0 ? "l" : off > 0 ? "l + " + std::to_string(off) : "l - " + std::to_string(-off))
                               : std::to_string(off);
      out += c == '\x01' ? "[" + e + "]" : e;
    }
    return out;
  }

  // A copy-like statement's result in its operand's buffer
  // (BufferPlan::takes_buffer_of): prints the move and returns true, or
  // prints nothing and returns false.
  bool take_operand_buffer(CodeWriter& w, int v) {
    const int a = plan_.takes_buffer_of[v];
    if (a < 0) return false;
    declared_.push_back(v);
    w.line(var_[v] + " = std::move(" + var_[a] + ");  // " + shape_comment(g_[v]) + ", in " + var_[a] +
           "'s buffer (its last use)");
    return true;
  }

  // An all-reduce bucket: ONE all_reduce over its members' buffers, in
  // place (Communicator::all_reduce over segments), with the chunks and
  // results of execute.cpp's packed buffer. A member takes its operand's
  // buffer where the bucket is the operand's last reader
  // (BufferPlan::takes_buffer_of), and a copy of it otherwise.
  void emit_bucket(CodeWriter& w, const Stmt& s) {
    const Node& head = g_[s.node];
    std::vector<int64_t> at;
    int64_t total = 0;
    for (int m : s.bucket) {
      at.push_back(total);
      total += ir::num_elements(g_[m].shape);
    }
    const std::string axes = "(" + join(head.axes, ", ") + ")";
    std::string id = std::to_string(head.dim2);
    if (scanned(head)) {
      // Numbered within its layer: each layer's buckets are the same.
      std::set<int> before;
      for (const Node& n : g_.nodes)
        if (n.op == Op::kAllReduce && n.repeat == head.repeat && n.iteration == head.iteration && n.dim2 >= 0 &&
            n.dim2 < head.dim2)
          before.insert(n.dim2);
      id = std::to_string(before.size()) + " of layer " + layer_ref(head);
    }
    w.line("// all_reduce bucket " + id + ": " + std::to_string(s.bucket.size()) + " values over " +
           axes + " as ONE collective of " + std::to_string(total) + " " +
           elem_type(head.dtype) + "s, in the values' own buffers");
    for (size_t k = 0; k < s.bucket.size(); ++k) {
      const int m = s.bucket[k];
      const int a = g_[m].args[0];
      const int64_t n = ir::num_elements(g_[m].shape);
      w.line(describe(g_[m], {a},
                      "all_reduce" + axes + ", bucket " + id + " [" + std::to_string(at[k]) + ", " +
                          std::to_string(at[k] + n) + ")"));
      if (!take_operand_buffer(w, m)) {
        w.line(declare(m, /*writes_all=*/true));
        w.line("rt::copy(" + ptr(a) + ", " + ptr(m) + ", " + std::to_string(n) + ");");
      }
    }
    w.line("comm.all_reduce(std::vector<rt::Segment<" + elem_type(head.dtype) + ">>{");
    for (size_t k = 0; k < s.bucket.size(); ++k)
      w.line("                    {" + ptr(s.bucket[k]) + ", " +
             std::to_string(ir::num_elements(g_[s.bucket[k]].shape)) + "},");
    w.line("                },");
    w.line("                " + group(head) + ", " + reduce_op(head.reduce) + ");");
  }

  // The statement's mark on the device's timeline (runtime/trace.h): its
  // name and, for computation, its virtual-clock cost (op_cost.h).
  void emit_mark(CodeWriter& w, const Stmt& s) {
    const std::string label = quoted(statement_label(g_[s.node]));
    if (is_comm_statement(g_, s)) {
      w.line("timeline.comm_op(" + label + ");");
      record_mark(EmittedMark::Kind::kCollective, s.node, {});
    } else {
      const rt::OpCost cost = statement_cost(g_, s);
      w.line("timeline.op(" + label + ", " + cost_literal(cost) + ");");
      EmittedMark& m = record_mark(EmittedMark::Kind::kKernel, s.node, cost);
      if (ir::is_elementwise(g_[s.node].op))
        for (int t : s.tree) m.fused.emplace_back(g_[t].loc, ir::op_name(g_[t].op));
    }
  }

  // Records a mark just written (EmittedFiles::marks; run() finds its line).
  // Collectives and ring_dots carry the report's bytes per device.
  EmittedMark& record_mark(EmittedMark::Kind kind, int node, const rt::OpCost& cost) {
    const Node& v = g_[node];
    EmittedMark m;
    m.kind = kind;
    m.stage = stage_;
    m.node = node;
    m.label = statement_label(v);
    m.op = ir::op_name(v.op);
    m.layer = v.name;
    m.loc = v.loc;
    m.flops = cost.flops;
    m.bytes = cost.bytes;
    if (kind == EmittedMark::Kind::kCollective || (kind == EmittedMark::Kind::kKernel && v.op == Op::kRingDot)) {
      if (!report_) report_ = predict(g_);
      for (const CollectiveReport& c : report_->collectives)
        if (c.node == node) {
          m.what = c.what;
          m.sent = c.bytes;
        }
    }
    marks_->push_back(std::move(m));
    return marks_->back();
  }
  static std::string cost_literal(const rt::OpCost& c) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "{.flops = %.17g, .bytes = %.17g}", c.flops, c.bytes);
    return buf;
  }

  // A window of `in` along dimension d inside `out` (pad, add_slice): the
  // elements after d (inner), the rows before it (outer), and one row's
  // extent in `in` and in `out`.
  struct Window {
    int64_t inner = 1, outer = 1, run = 0, out_run = 0;
  };
  static Window window(const Shape& in, const Shape& out, int d) {
    Window w;
    for (size_t k = d + 1; k < in.size(); ++k) w.inner *= in[k];
    for (int k = 0; k < d; ++k) w.outer *= in[k];
    w.run = in[d] * w.inner;
    w.out_run = out[d] * w.inner;
    return w;
  }

  void emit_stmt(CodeWriter& w, const Stmt& s) {
    const Node& v = g_[s.node];
    const int id = s.node;
    const std::string count = std::to_string(ir::num_elements(v.shape));
    auto a0 = [&] { return ptr(v.args[0]); };
    auto shape0 = [&] { return braced(g_[v.args[0]].shape); };
    std::vector<std::string> q;
    for (auto& a : v.axes) q.push_back(a);
    const std::string axes = "(" + join(q, ", ") + ")";
    if (!s.bucket.empty()) return emit_bucket(w, s);
    if (ir::is_elementwise(v.op)) return emit_fused(w, s);
    if (v.op == Op::kDot) return emit_dot(w, s);
    if (v.op == Op::kRingDot) return emit_ring_dot(w, s);
    if (v.op == Op::kRandomUniform) return emit_random_uniform(w, s);
    switch (v.op) {
      case Op::kInput: {
        w.line("// " + (v.loc.known() ? v.loc.str() + ": " : "") + "input \"" + v.name + "\" " +
               ir::shape_str(global_shape(v)) + " " + v.sharding->str() +
               " => this device's block");
        w.line(declare(id, /*writes_all=*/true));
        const std::string k = std::to_string(ep_.input_index.at(v.name));
        w.line("if (const auto* block = in.blocks.get<" + elem_type(v.dtype) + ">(" + k + ", rank))  // set_block()");
        w.line("  std::copy_n(block, " + std::to_string(ir::num_elements(v.shape)) + ", " + var_[id] + ".data());");
        w.line("else");
        w.line("  " + block_from_global(v, "in." + field_.at(v.name), var_[id] + ".data()"));
        return;
      }
      case Op::kConstant:
        w.line(describe(v, {}, "constant"));
        w.line(declare(id, /*writes_all=*/true));
        w.line("rt::fill(" + ptr(id) + ", " + count + ", " + float_literal(v.scalar) + ");");
        return;
      case Op::kIota: {
        // value = global index along d: this block's start + the local index.
        const int d = v.ints[0];
        int64_t inner = 1;
        for (size_t k = d + 1; k < v.shape.size(); ++k) inner *= v.shape[k];
        std::string local = inner == 1 ? "i" : "(i / " + std::to_string(inner) + ")";
        if (ir::num_elements(v.shape) / inner != v.shape[d])
          local += " % " + std::to_string(v.shape[d]);
        const std::string start = block_start_expr(v, d);
        const std::string index = start == "0" ? local : start + " + " + local;
        w.line(describe(v, {}, "iota dim=" + std::to_string(d) + " (global index)"));
        w.line(declare(id));
        w.line("for (int64_t i = 0; i < " + count + "; ++i) " + var_[id] +
               "[i] = " + stored(v.dtype, "static_cast<float>(" + index + ")") + ";");
        return;
      }
      case Op::kSlice: {
        // Local: the sliced dimension is whole on every device.
        const auto st = strides_of(g_[v.args[0]].shape);
        const int64_t start = v.ints[1] * st[v.ints[0]];
        // A scanned layer's row of a stacked parameter: at the layer's index.
        const bool row = layer_row(v);
        w.line(describe(v, s.reads,
                        "slice dim=" + std::to_string(v.ints[0]) + " [" + iter_int(v, v.ints[1]) + ", " +
                            iter_int(v, v.ints[1] + v.ints[2], 1) + ")"));
        w.line(declare(id, /*writes_all=*/true));
        const std::string at = row ? a0() + " + " + iter_int(v, v.ints[1]) + " * " + std::to_string(st[0])
                               : start == 0 ? a0() : a0() + " + " + std::to_string(start);
        w.line("rt::strided_copy(" + at + ", " + braced(v.shape) + ", " + braced(st) + ", " + ptr(id) + ");");
        return;
      }
      case Op::kPad: {
        // Local: the padded dimension is whole on every device. The buffer
        // starts zeroed; each outer row of the operand lands `before` rows in.
        const int d = v.ints[0];
        const Window win = window(g_[v.args[0]].shape, v.shape, d);
        const int64_t outer = win.outer;
        const std::string run = std::to_string(win.run), out_run = std::to_string(win.out_run);
        const int64_t before = v.ints[1] * win.inner;
        const std::string at = before == 0 ? "" : " + " + std::to_string(before);
        w.line(describe(v, s.reads,
                        "pad dim=" + std::to_string(d) + " before=" + std::to_string(v.ints[1]) +
                            " after=" + std::to_string(v.ints[2])));
        w.line(declare(id) + ", zeroed");
        if (outer == 1) {
          w.line("rt::copy(" + a0() + ", " + ptr(id) + at + ", " + run + ");");
        } else {
          w.line("for (int64_t i = 0; i < " + std::to_string(outer) + "; ++i)");
          w.line("  rt::copy(" + a0() + " + i * " + run + ", " + ptr(id) + " + i * " + out_run +
                 at + ", " + run + ");");
        }
        return;
      }
      case Op::kAddSlice: {
        // Local: the dimension added into is whole on every device. In the
        // target's buffer where this is its last reader, else in a copy of it.
        const Shape& in = g_[v.args[1]].shape;
        const int d = v.ints[0];
        const auto [inner, outer, run, out_run] = window(in, v.shape, d);
        const int64_t before = v.ints[1] * inner;
        const bool row = layer_row(v);  // a scanned layer's row of a stacked gradient
        const std::string before_expr =
            row ? iter_int(v, v.ints[1]) + " * " + std::to_string(inner) : std::to_string(before);
        w.line(describe(v, s.reads, "add_slice dim=" + std::to_string(d) + " [" + iter_int(v, v.ints[1]) + ", " +
                                        iter_int(v, v.ints[1] + in[d], 1) + ")"));
        if (!take_operand_buffer(w, id)) {
          w.line(declare(id, /*writes_all=*/true));
          w.line("rt::copy(" + a0() + ", " + ptr(id) + ", " + count + ");");
        }
        const std::string x = var_[id], y = var_[v.args[1]];
        const std::string sum = stored(v.dtype, "static_cast<float>(" + x + "[o]) + static_cast<float>(" + y + "[i])");
        if (outer == 1) {
          w.line("for (int64_t i = 0; i < " + std::to_string(run) + "; ++i) {");
          w.line("  const int64_t o = " + (before == 0 && !row ? std::string("i") : before_expr + " + i") + ";");
        } else {
          w.line("for (int64_t i = 0; i < " + std::to_string(outer * run) + "; ++i) {");
          w.line("  const int64_t o = i / " + std::to_string(run) + " * " + std::to_string(out_run) +
                 (before == 0 && !row ? "" : " + " + before_expr) + " + i % " + std::to_string(run) + ";");
        }
        w.line("  " + x + "[o] = " + sum + ";");
        w.line("}");
        return;
      }
      case Op::kReshape:
      case Op::kShardingConstraint:
        w.line(describe(v, s.reads, ir::op_name(v.op)));
        if (!take_operand_buffer(w, id)) {
          w.line(declare(id, /*writes_all=*/true));
          w.line("rt::copy(" + a0() + ", " + ptr(id) + ", " + count + ");");
        }
        return;
      case Op::kBroadcast: {
        Shape expanded(v.shape.size(), 1);
        for (size_t i = 0; i < v.ints.size(); ++i) expanded[v.ints[i]] = g_[v.args[0]].shape[i];
        w.line(describe(v, s.reads, "broadcast"));
        w.line(declare(id, /*writes_all=*/true));
        w.line("rt::broadcast(" + a0() + ", " + braced(expanded) + ", " + braced(v.shape) + ", " +
               ptr(id) + ");");
        return;
      }
      case Op::kTranspose:
        w.line(describe(v, s.reads, "transpose"));
        w.line(declare(id, /*writes_all=*/true));
        w.line("rt::transpose(" + a0() + ", " + shape0() + ", " + braced(v.ints) + ", " + ptr(id) +
               ");");
        return;
      case Op::kReduce:
        w.line(describe(v, s.reads, std::string("reduce ") + ir::reduce_name(v.reduce)));
        w.line(declare(id, /*writes_all=*/true));
        w.line("rt::reduce(" + a0() + ", " + shape0() + ", " + braced(v.ints) + ", " +
               reduce_op(v.reduce) + ", " + ptr(id) + ");");
        return;
      case Op::kAllGather:
        w.line(describe(v, s.reads, "all_gather" + axes));
        w.line(declare(id, /*writes_all=*/true));
        w.line("rt::all_gather_dim(comm, " + group(v) + ", " + a0() + ", " + shape0() +
               ", /*dim=*/" + std::to_string(v.dim) + ", " + ptr(id) + ");");
        return;
      case Op::kReduceScatter:
        w.line(describe(v, s.reads, "reduce_scatter" + axes));
        w.line(declare(id, /*writes_all=*/true));
        w.line("rt::reduce_scatter_dim(comm, " + group(v) + ", " + a0() + ", " + shape0() +
               ", /*dim=*/" + std::to_string(v.dim) + ", " + ptr(id) + ", " + reduce_op(v.reduce) +
               ");");
        return;
      case Op::kAllReduce:
        w.line(describe(v, s.reads, "all_reduce" + axes));
        if (!take_operand_buffer(w, id)) {
          w.line(declare(id, /*writes_all=*/true));
          w.line("rt::copy(" + a0() + ", " + ptr(id) + ", " + count + ");");
        }
        w.line("comm.all_reduce(" + ptr(id) + ", " + count + ", " + group(v) + ", " +
               reduce_op(v.reduce) + ");");
        return;
      case Op::kAllToAll:
        w.line(describe(v, s.reads, "all_to_all" + axes));
        w.line(declare(id, /*writes_all=*/true));
        w.line("rt::all_to_all_dim(comm, " + group(v) + ", " + a0() + ", " + shape0() +
               ", /*split_dim=*/" + std::to_string(v.dim) + ", /*concat_dim=*/" +
               std::to_string(v.dim2) + ", " + ptr(id) + ");");
        return;
      case Op::kPPermute: {
        // shard_map's ppermute (dsl/shard_map.h): receivers of nothing get zeros.
        std::vector<std::string> pairs;
        for (size_t i = 0; i + 1 < v.ints.size(); i += 2)
          pairs.push_back("{" + std::to_string(v.ints[i]) + ", " + std::to_string(v.ints[i + 1]) +
                          "}");
        w.line(describe(v, s.reads, "ppermute" + axes));
        w.line(declare(id));
        w.line("comm.ppermute(" + a0() + ", " + ptr(id) + ", " + count + ", " + group(v) +
               ", rt::Permutation{" + join(pairs, ", ") + "});");
        return;
      }
      case Op::kSend:
      case Op::kRecv: {
        // A pipeline stage boundary (split_stages): the device at stage ints[0]
        // with this device's other coordinates; the value's id is the tag.
        const std::string peer = "world_.mesh().peer_on_axis(rank, " +
                                 std::to_string(mesh_.index(v.axes[0])) + ", " + std::to_string(v.ints[0]) + ")";
        const std::string tag = std::to_string(v.ints[1]);
        if (v.op == Op::kSend) {
          w.line(describe(v, s.reads, "send to stage " + std::to_string(v.ints[0]) + " (message " + tag + ")"));
          w.line("comm.send(" + a0() + ", " + count + ", " + peer + ", " + tag + ");");
        } else {
          w.line(describe(v, {}, "receive from stage " + std::to_string(v.ints[0]) + " (message " + tag + ")"));
          w.line(declare(id, /*writes_all=*/true));
          w.line("comm.recv(" + ptr(id) + ", " + count + ", " + peer + ", " + tag + ");");
        }
        return;
      }
      case Op::kAxisIndex:
        w.line(describe(v, s.reads, "axis_index" + axes));
        w.line(declare(id));
        w.line(ptr(id) + "[0] = static_cast<float>(" + group(v) + ".position);");
        return;
      case Op::kLocalSlice:
        w.line(describe(v, s.reads, "local_slice" + axes));
        w.line(declare(id, /*writes_all=*/true));
        w.line("rt::slice_block(" + a0() + ", " + shape0() + ", /*dim=*/" + std::to_string(v.dim) +
               ", " + group(v) + ".size(), " + group(v) + ".position, " + ptr(id) + ");");
        return;
      default:
        break;
    }
    internal_error(std::string("emit_cpu cannot emit ") + ir::op_name(v.op) + " " +
                   ir::shape_str(v.shape) + " at " + v.loc.str());
  }

  // Each device writes its block of every output into the block the caller
  // bound for it, if any, and into the caller's global array, if any. A block
  // held by several devices (replicated over some axes) is written into the
  // global array by the one at coordinate 0 on those axes only, which marks
  // it written (for rt::complete_global across processes).
  void emit_output(CodeWriter& w, const ir::Output& o) {
    const Node& v = g_[o.value];
    const std::string k = std::to_string(ep_.output_index.at(o.name));
    const std::string field = "out." + out_field_.at(o.name);
    w.line("// \"" + o.name + "\" (" + o.loc.str() + "): block " + shape_comment(v) +
           " of the global " + ir::shape_str(global_shape(v)) + replicated_note(v));
    w.line("if (float* block = out.blocks.get_mutable<float>(" + k + ", rank))  // set_block()");
    w.line("  std::copy_n(" + ptr(o.value) + ", " + std::to_string(ir::num_elements(v.shape)) + ", block);");
    emit_block_to_global(w, v, ptr(o.value), field, quoted(o.name), field, "out.blocks.mark(" + k + ", rank);");
  }

  // The mesh axes a value is replicated over (size > 1, used by no dimension):
  // its block is held by several devices, and the one at coordinate 0 on them
  // writes it. Returns the guard conditions and the quoted axis names.
  std::pair<std::vector<std::string>, std::vector<std::string>> replicas(const Node& v) const {
    std::vector<std::string> owner, repl;
    for (auto& a : mesh_.axes()) {
      bool used = false;
      for (auto& d : v.sharding->dims)
        used = used || std::find(d.begin(), d.end(), a.name) != d.end();
      if (used || a.size == 1 || a.name == pipe_axis_) continue;  // a stage's body runs on its stage only
      owner.push_back("dev." + axis_var_.at(a.name) + " == 0");
      repl.push_back(quoted(a.name));
    }
    return {owner, repl};
  }

  std::string replicated_note(const Node& v) const {
    const auto repl = replicas(v).second;
    return repl.empty() ? "" : "; replicated over " + join(repl, ", ") + ", so one copy writes it";
  }

  // Copies this device's block of v (at `src`, local row-major) into its place
  // in the global row-major array `dst`, guarded so that one replica writes
  // (and by `also`, when given); `mark` is a statement that records the write.
  void emit_block_to_global(CodeWriter& w, const Node& v, const std::string& src,
                            const std::string& dst, const std::string& what,
                            const std::string& also = "", const std::string& mark = "") const {
    const Shape gs = global_shape(v);
    std::vector<std::string> owner = replicas(v).first;
    if (!also.empty()) owner.insert(owner.begin(), also);
    const bool guarded = !owner.empty();
    if (guarded) w.open("if (" + join(owner, " && ") + ")");
    if (!mark.empty()) w.line(mark);
    if (v.shape.empty()) {
      w.line(dst + "[0] = " + src + "[0];");
    } else {
      // Copy whole runs: dims after k are not split, so each block row from
      // dim k on is contiguous in both arrays.
      int k = static_cast<int>(v.shape.size()) - 1;
      while (k > 0 && v.shape[k] == gs[k]) --k;
      const auto gst = strides_of(gs), lst = strides_of(v.shape);
      int64_t chunk = 1;
      for (size_t d = k; d < v.shape.size(); ++d) chunk *= v.shape[d];
      std::vector<std::string> src_terms, dst_terms;
      int loops = 0;
      for (int d = 0; d < k; ++d) {
        const std::string start = block_start_expr(v, d);
        std::string idx;
        if (v.shape[d] > 1) {
          idx = "i" + std::to_string(d);
          w.open("for (int64_t " + idx + " = 0; " + idx + " < " + std::to_string(v.shape[d]) +
                 "; ++" + idx + ")");
          ++loops;
          src_terms.push_back(idx + " * " + std::to_string(lst[d]));
        }
        std::string at = start == "0" ? idx : idx.empty() ? start : "(" + start + " + " + idx + ")";
        if (!at.empty()) dst_terms.push_back(at + " * " + std::to_string(gst[d]));
      }
      const std::string start_k = block_start_expr(v, k);
      if (start_k != "0")
        dst_terms.push_back(gst[k] == 1 ? start_k : start_k + " * " + std::to_string(gst[k]));
      const std::string s = src_terms.empty() ? src : src + " + " + join(src_terms, " + ");
      const std::string d = dst_terms.empty() ? dst : dst + " + " + join(dst_terms, " + ");
      w.line("std::copy_n(" + s + ", " + std::to_string(chunk) + ", " + d + ");");
      for (int l = loops - 1; l >= 0; --l) w.close();
    }
    if (guarded) w.close(what);
  }

  // The statement that fills `dst` (this device's block of v, local
  // row-major) from the global row-major array `src`, as for inputs.
  std::string block_from_global(const Node& v, const std::string& src,
                                const std::string& dst) const {
    if (v.shape.empty()) {
      const std::string data = ".data()";
      const bool buffer = dst.size() > data.size() && dst.ends_with(data);
      return (buffer ? dst.substr(0, dst.size() - data.size()) : dst) + "[0] = " + src + "[0];";
    }
    const std::string off = block_offset_expr(v);
    return "rt::strided_copy(" + (off == "0" ? src : src + " + " + off) + ", " + braced(v.shape) +
           ", " + braced(strides_of(global_shape(v))) + ", " + dst + ");";
  }

  // set_parameter / get_parameter: one branch per parameter, run for every
  // device in turn on the caller's thread.
  std::string parameter_transfer(bool set) const {
    CodeWriter w(2);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& v = g_.nodes[i];
      if (v.op != Op::kParameter) continue;
      std::string held = held_here(v);
      if (!set && !held.empty())  // one holder writes the caller's array
        held = "dev." + axis_var_.at(pipe_axis_) + " == " + std::to_string(holders_.at(v.name).front());
      const std::string cond = "if (path == " + quoted(v.name) + (held.empty() ? "" : " && (" + held + ")") + ")";
      const std::string buf = "dev." + var_[i] + ".data()";
      if (set) {
        w.line(cond + " " + block_from_global(v, "global", buf));
        continue;
      }
      w.open(cond);
      w.line("// block " + shape_comment(v) + " of the global " + ir::shape_str(global_shape(v)) +
             replicated_note(v));
      emit_block_to_global(w, v, buf, "global", "", "", "wrote[rank] = 1;");
      w.close(quoted(v.name));
    }
    return w.str();
  }

  // ---- the step -------------------------------------------------------------
  //
  // The step's statements are printed one by one (each with the section rule
  // above it when the section changes) and then put together as parts, each a
  // member function of a struct that holds every buffer of the step:
  // Program::Step for a whole program, Program::Step::StageN for the program
  // of pipeline stage N (pipelined_body).

  struct Chunk {
    std::string heading;  // a pipeline stage's unit title, at the first statement of a unit
    std::string rule;     // the section's rule line, "" inside a section
    std::string text;     // the statement, its mark and the buffers freed after it
    std::vector<int> declares;  // the values whose buffers it makes (declare())
    int lines = 0;
    int unit = -1;             // a pipeline stage's unit (StagePlan::units), -1 for a whole program
    std::string phase, block;  // the part it belongs to (see part_of)
    int repeat = -1, iteration = -1;  // a scanned layer's statement (Node::repeat, iteration)
    size_t marks_begin = 0, marks_end = 0;  // the marks it recorded (marks_)
    int loop = -1;         // fold_layers: written once for the layers of loops_[loop]
    bool dropped = false;  // fold_layers: another layer's copy of a loop's statement
  };

  std::vector<Chunk> step_chunks() {
    const std::vector<Stmt>& stmts = plan_.stmts;
    std::vector<Chunk> chunks;
    std::string current = "\x02";
    int unit = -1;
    for (size_t k = 0; k < stmts.size(); ++k) {
      Chunk c;
      if (units_ && node_unit_[stmts[k].node] != unit) {  // a pipeline stage's next unit
        unit = node_unit_[stmts[k].node];
        c.heading = "// ==== " + unit_title((*units_)[unit]) + " ====";
        current = "\x02";
      }
      c.unit = unit;
      const Node a = anchor(stmts[k]);
      const auto [key, title] = section(a);
      c.rule = rule(title);
      if (key == current) c.rule.clear();
      current = key;
      CodeWriter w(1);
      const size_t before = declared_.size();
      const Node& v = g_[stmts[k].node];
      if (scanned(v)) {
        c.repeat = v.repeat;
        c.iteration = v.iteration;
      }
      c.marks_begin = marks_->size();
      emit_mark(w, stmts[k]);
      emit_stmt(w, stmts[k]);
      c.marks_end = marks_->size();
      c.declares.assign(declared_.begin() + static_cast<std::ptrdiff_t>(before), declared_.end());
      for (int r : plan_.frees_after[k]) {
        // In a scanned layer, a value from outside the layers is freed by
        // the layer that reads it last only (fold_layers guards the line).
        const bool outside = c.iteration >= 0 && !per_layer(var_[r]);
        w.line((outside ? "\x05" : "") + var_[r] + " = " + buf_type(g_[r].dtype) + "();  // last use of " + var_[r]);
      }
      c.text = w.str();
      c.lines = static_cast<int>(std::count(c.text.begin(), c.text.end(), '\n')) + 1;
      std::tie(c.phase, c.block) = part_of(a);
      chunks.push_back(std::move(c));
    }
    return chunks;
  }

  // The part of the step a statement belongs to: its phase ("forward",
  // "backward" for the gradient computation, "optimizer" for the step after
  // the micro-batches) and its block, the first component of its layer label
  // ("h0" for "h0/attn/qkv"; "" outside layers, which joins the part before).
  static std::pair<std::string, std::string> part_of(const Node& v) {
    const std::string phase =
        v.micro_batch == ir::kAfterMicroBatches ? "optimizer" : v.backward || v.remat ? "backward" : "forward";
    std::string block;
    if (v.op != Op::kInput && v.op != Op::kParameter && !v.name.empty())
      block = v.name.substr(0, v.name.find('/'));
    return {phase, block};
  }

  // A pipeline stage's unit as a part's name: "pre", "forward_mb3",
  // "backward_mb0_chunk5" (with several model chunks per stage: the model's
  // chunk 5), "post".
  std::string unit_name(int unit) const {
    const StageUnit& u = (*units_)[unit];
    switch (u.phase) {
      case StageUnit::Phase::kPre: return "pre";
      case StageUnit::Phase::kPost: return "post";
      case StageUnit::Phase::kForward:
      case StageUnit::Phase::kBackward:
        break;
    }
    return std::string(u.phase == StageUnit::Phase::kForward ? "forward" : "backward") + "_mb" +
           std::to_string(u.micro_batch) + (chunks_per_stage_ > 1 ? "_chunk" + std::to_string(u.chunk) : "");
  }

  // A part of a step holds at most this many statement lines, unless one
  // statement is longer: GCC's time on a function grows faster than its
  // length, so a deep model's step compiles in time linear in its depth.
  static constexpr int kMaxPartLines = 800;

  struct Part {
    std::string name;  // the member function, "forward_h0"
    std::string what;  // what it computes, for its comment
    std::vector<int> chunks;
    int loop = -1;     // called for each layer l of loops_[loop]
  };

  // The body of forward_device (or of a pipeline stage's case in it, at
  // `indent`); step_struct_ and step_parts_ receive the rest.
  std::string forward_body(int indent) {
    if (stages_) return pipelined_body();
    CodeWriter tail(1);
    tail.line(rule("outputs"));
    for (auto& o : g_.outputs) emit_output(tail, o);
    if (!g_.updates.empty()) {
      tail.line();
      tail.line(rule("updates: parameters take their new values"));
      emit_updates(tail);
    }
    std::vector<Chunk> chunks = step_chunks();
    fold_layers(chunks);
    return split_step(chunks, spell_layers(tail.str(), 0, false), indent);
  }

  // Finds each scanned Layers' runs of statements, one segment per layer
  // (its forward, or its backward with the recomputed values it reads), and
  // writes them once, relative to the layer l, where every layer's segment
  // reads the same relative to its layer: the first layer run (layer 0 in
  // the forward pass, L-1 in the backward) stays as written when it differs
  // (it reads the values from before the layers instead of the previous
  // layer's), and the others become loops_ over the rest. A free of a value
  // from outside the layers is guarded by the layer that frees it. Every
  // other statement's markers are spelled as the literal layer.
  void fold_layers(std::vector<Chunk>& chunks) {
    auto same_group = [&](const Chunk& a, const Chunk& b) {
      return b.iteration >= 0 && b.repeat == a.repeat && b.phase == a.phase && b.unit == a.unit;
    };
    for (size_t k = 0; k < chunks.size();) {
      if (chunks[k].iteration < 0) {
        ++k;
        continue;
      }
      std::vector<std::pair<size_t, size_t>> segs;  // [begin, end) of each layer's statements
      size_t e = k;
      int step = 0;
      while (e < chunks.size() && same_group(chunks[k], chunks[e])) {
        const size_t b = e;
        while (e < chunks.size() && same_group(chunks[k], chunks[e]) && chunks[e].iteration == chunks[b].iteration) ++e;
        if (!segs.empty()) {
          const int d = chunks[b].iteration - chunks[segs.back().first].iteration;
          if ((d != 1 && d != -1) || (step != 0 && d != step)) {
            e = b;
            break;
          }
          step = d;
        }
        segs.emplace_back(b, e);
      }
      fold_group(chunks, segs, step);
      k = e;
    }
    for (Chunk& c : chunks)
      if (c.loop < 0) c.text = spell_layers(c.text, 0, false);
    // The marks of the statements folded away are not in the source.
    std::vector<EmittedMark> kept;
    size_t next = 0;
    for (const Chunk& c : chunks) {
      for (; next < c.marks_begin; ++next) kept.push_back((*marks_)[next]);
      if (!c.dropped)
        for (size_t m = c.marks_begin; m < c.marks_end; ++m) kept.push_back((*marks_)[m]);
      next = c.marks_end;
    }
    for (; next < marks_->size(); ++next) kept.push_back((*marks_)[next]);
    *marks_ = std::move(kept);
  }

  void fold_group(std::vector<Chunk>& chunks, const std::vector<std::pair<size_t, size_t>>& segs, int step) {
    if (segs.size() < 2) return;
    // A segment's statements relative to its layer, outside frees dropped.
    auto relative = [&](size_t s) {
      std::vector<std::string> r;
      for (size_t k = segs[s].first; k < segs[s].second; ++k)
        r.push_back(chunks[k].rule + '\0' + spell_layers(chunks[k].text, chunks[k].iteration, true));
      return r;
    };
    const std::vector<std::string> body = relative(1);
    for (size_t s = 2; s < segs.size(); ++s)
      if (const std::vector<std::string> r = relative(s); r != body) {
        // Not the same code: the layers stay written out, and say why.
        std::string line = "a different number of statements";
        for (size_t i = 0; i < std::min(r.size(), body.size()); ++i)
          if (r[i] != body[i]) {
            std::istringstream a(body[i].substr(body[i].find('\0') + 1)), b(r[i].substr(r[i].find('\0') + 1));
            for (std::string x, y; std::getline(a, x) && std::getline(b, y);)
              if (x != y) {
                line = "\"" + y.substr(y.find_first_not_of(' ')) + "\"";
                break;
              }
            break;
          }
        Chunk& first = chunks[segs[0].first];
        const ir::Repeat& rep = g_.repeats[first.repeat];
        first.text = "  // Layers '" + rep.name + "' (" + rep.loc.str() + ") written out, not looped: layer " +
                     std::to_string(chunks[segs[s].first].iteration) + "'s code differs from layer " +
                     std::to_string(chunks[segs[1].first].iteration) + "'s at " + line + "\n" + first.text;
        return;
      }
    const size_t from = relative(0) == body ? 0 : 1;
    Loop loop;
    loop.first = chunks[segs[from].first].iteration;
    loop.last = chunks[segs.back().first].iteration;
    loop.step = step;
    loops_.push_back(loop);
    const int id = static_cast<int>(loops_.size()) - 1;
    const size_t n = segs[from].second - segs[from].first;
    for (size_t c = 0; c < n; ++c) {
      Chunk& head = chunks[segs[from].first + c];
      std::string text = spell_layers(head.text, head.iteration, true);
      // Frees of values from outside the layers, by the layer that frees them.
      for (size_t s = from; s < segs.size(); ++s) {
        const Chunk& x = chunks[segs[s].first + c];
        std::istringstream lines(x.text);
        for (std::string line; std::getline(lines, line);)
          if (const size_t at = line.find('\x05'); at != std::string::npos)
            text += "\n" + line.substr(0, at) + "if (l == " + std::to_string(x.iteration) + ") " + line.substr(at + 1);
      }
      head.text = text;
      head.loop = id;
      head.lines = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
      for (size_t s = from + 1; s < segs.size(); ++s) {
        chunks[segs[s].first + c].loop = id;
        chunks[segs[s].first + c].dropped = true;
      }
    }
  }

  // The step as parts (see above); step_struct_ and step_parts_ receive the
  // struct and the parts' definitions. A new part starts where the phase,
  // the block or a pipeline stage's unit changes, or where the part would
  // pass kMaxPartLines; the outputs and the updates are the last part. Every
  // buffer of the step is a member, in the order the step makes them, so
  // which part uses a value never changes how it is spelled (declare()).
  // Returns the lines that run the step, at `indent`: construct the struct
  // and call the parts in order.
  std::string split_step(const std::vector<Chunk>& chunks, const std::string& tail, int indent) {
    std::vector<Part> parts;
    std::string phase = "\x02", block;
    int unit = -2, lines = 0;
    std::map<std::string, int> used;
    int loop = -1;
    std::set<std::string> value_names;  // a part is not named as a value
    for (const std::string& v : var_) value_names.insert(base_name(v));
    auto start = [&](const Chunk& c, const std::string& bl, size_t first) {
      Part p;
      const std::string head = c.unit >= 0 ? unit_name(c.unit) : c.phase;
      const std::string base = head + (bl.empty() ? "" : "_" + cpp::identifier(bl)) + (c.loop >= 0 ? "_layer" : "");
      const int n = ++used[base];
      p.name = base + (n == 1 ? "" : "_" + std::to_string(n));
      if (value_names.count(p.name)) p.name += "_part";
      const std::string doing = c.unit >= 0 ? unit_title((*units_)[c.unit]) : c.phase == "optimizer" ? "optimizer step" : c.phase;
      p.what = (bl.empty() ? "" : bl + " in ") + doing + (n == 1 ? "" : ", part " + std::to_string(n));
      if (bl.empty()) p.what += ", from " + section(anchor(plan_.stmts[first])).second;
      if (c.loop >= 0) {
        const Loop& lp = loops_[c.loop];
        p.what += ", of layer l (called for layers " + std::to_string(lp.first) + ".." + std::to_string(lp.last) + ")";
      }
      p.loop = c.loop;
      parts.push_back(std::move(p));
      phase = c.phase;
      block = bl;
      unit = c.unit;
      loop = c.loop;
      lines = 0;
    };
    for (size_t k = 0; k < chunks.size(); ++k) {
      const Chunk& c = chunks[k];
      if (c.dropped) continue;
      if (c.unit != unit || c.phase != phase || c.loop != loop || (!c.block.empty() && c.block != block))
        start(c, c.block.empty() && c.phase == phase && c.unit == unit && c.loop == loop ? block : c.block, k);
      else if (lines > 0 && lines + c.lines > kMaxPartLines)
        start(c, block, k);
      parts.back().chunks.push_back(static_cast<int>(k));
      lines += c.lines;
    }
    Part last;
    last.name = std::find(var_.begin(), var_.end(), "outputs") != var_.end() ? "outputs_part" : "outputs";
    last.what = g_.updates.empty() ? "the outputs" : "the outputs, and parameters take their new values";
    parts.push_back(std::move(last));

    // Each part's text: the first chunk always shows its section's rule.
    std::vector<std::string> raw(parts.size());
    for (size_t p = 0; p < parts.size(); ++p) {
      CodeWriter w(1);
      if (parts[p].chunks.empty()) w.text(tail);
      for (int k : parts[p].chunks) {
        const Chunk& c = chunks[k];
        const bool first = k == parts[p].chunks.front();
        if (!c.heading.empty()) {
          if (!first) w.line();
          w.line(c.heading);
        }
        if (first) {
          w.line(rule(section(anchor(plan_.stmts[k])).second));
        } else if (!c.rule.empty()) {
          w.line();
          w.line(c.rule);
        }
        w.text(c.text);
      }
      raw[p] = w.str();
    }
    // (value, part), in the order the step makes them. A scanned layer's
    // values are one member array each, named by the part that makes its
    // first element (a folded-away statement's: its loop's first part).
    std::vector<int> part_of_chunk(chunks.size(), -1);
    std::map<int, int> part_of_loop;
    for (size_t p = 0; p < parts.size(); ++p) {
      for (int k : parts[p].chunks) part_of_chunk[k] = static_cast<int>(p);
      if (parts[p].loop >= 0) part_of_loop.try_emplace(parts[p].loop, static_cast<int>(p));
    }
    std::vector<std::pair<int, int>> declared;
    std::set<std::string> arrays;
    for (size_t k = 0; k < chunks.size(); ++k) {
      const int p = chunks[k].dropped ? part_of_loop.at(chunks[k].loop) : part_of_chunk[k];
      for (int v : chunks[k].declares)
        if (!per_layer(var_[v]) || arrays.insert(base_name(var_[v])).second) declared.emplace_back(v, p);
    }

    const std::string type = stage_ >= 0 ? "Stage" + std::to_string(stage_) : "Step";
    const std::string qualified = stage_ >= 0 ? "Program::Step::" + type : "Program::Step";
    CodeWriter st(0);
    if (stage_ >= 0) {
      st.line("// Pipeline stage " + std::to_string(stage_) + "'s step on one of its devices, as Program::Step is a");
      st.line("// whole program's: the device's state, every buffer of the stage's program, and");
      st.line("// its parts, one member function each (a micro-batch's forward or backward of");
      st.line("// a block, the optimizer).");
    } else {
      st.line("// One step on one device: the device's state, the step's inputs and outputs,");
      st.line("// every buffer of the step (empty until the part that makes it, freed after its");
      st.line("// last use), and the parts, one member function each (a block's forward, its");
      st.line("// backward, the optimizer), so that the compiler takes one part at a time.");
    }
    st.open("struct " + qualified);
    st.line("rt::World& world_;");
    st.line("Device& dev;");
    st.line("rt::Communicator& comm;");
    st.line("rt::DeviceMemory& mem;");
    st.line("rt::Timeline& timeline;");
    st.line("const Inputs& in;");
    st.line("Outputs& out;");
    st.line("int rank;");
    st.line(type + "(rt::World& world, Device& dev_, rt::Communicator& comm_, rt::DeviceMemory& mem_,");
    st.line(std::string(type.size() + 1, ' ') + "rt::Timeline& timeline_, const Inputs& in_, Outputs& out_, int rank_)");
    st.line("    : world_(world), dev(dev_), comm(comm_), mem(mem_), timeline(timeline_), in(in_), out(out_), rank(rank_) {}");
    st.line();
    for (const auto& [v, p] : declared) {
      // No shapes here (the assignment has them), so a mesh changes only the
      // list of buffers, not every line of it.
      const std::string from = "from " + parts[p].name + "()";
      if (const int param = plan_.in_place_of[v]; param >= 0)
        st.line("rt::Buffer& " + var_[v] + " = dev." + var_[param] + ";  // the new \"" + g_[param].name +
                "\" computed in place, " + from);
      else if (per_layer(var_[v]))
        st.line(buf_type(g_[v].dtype) + " " + base_name(var_[v]) + "[" + std::to_string(g_.repeats[g_[v].repeat].length) +
                "];  // per layer, " + from);
      else
        st.line(buf_type(g_[v].dtype) + " " + var_[v] + ";  // " + from);
    }
    st.line();
    for (const Part& p : parts) st.line("void " + p.name + (p.loop >= 0 ? "(int64_t l)" : "()") + ";  // " + p.what);
    --st;
    st.line("};  // struct " + qualified);
    step_struct_ = st.str();
    if (!layer_keys_.empty()) {
      CodeWriter keys(0);
      keys.line("// The random streams of the scanned layers' random_uniform calls, by layer.");
      for (const auto& [table, ks] : layer_keys_)
        keys.line("constexpr uint64_t " + table + "[] = {" + join(ks, ", ") + "};");
      keys.line();
      step_struct_ = keys.str() + step_struct_;
    }

    for (size_t p = 0; p < parts.size(); ++p) {
      CodeWriter fn(0);
      fn.line("// " + parts[p].what);
      fn.open("void " + qualified + "::" + parts[p].name + (parts[p].loop >= 0 ? "(int64_t l)" : "()"));
      fn.text(raw[p]);
      fn.close(qualified + "::" + parts[p].name);
      step_fns_.push_back({qualified + "::" + parts[p].name, fn.str()});
    }

    CodeWriter w(indent);
    w.line((stage_ >= 0 ? "Step::" : "") + type + " step(world_, dev, comm, mem, timeline, in, out, rank);");
    for (size_t p = 0; p < parts.size();) {
      if (parts[p].loop < 0) {
        w.line("step." + parts[p].name + "();");
        ++p;
        continue;
      }
      const int id = parts[p].loop;
      const Loop& lp = loops_[id];
      w.open("for (int64_t l = " + std::to_string(lp.first) + "; l " + (lp.step > 0 ? "<= " : ">= ") +
             std::to_string(lp.last) + "; " + (lp.step > 0 ? "++l" : "--l") + ")");
      for (; p < parts.size() && parts[p].loop == id; ++p) w.line("step." + parts[p].name + "(l);");
      w.close();
    }
    return w.str();
  }

  static std::string unit_title(const StageUnit& u) {
    switch (u.phase) {
      case StageUnit::Phase::kPre: return "before the micro-batches";
      case StageUnit::Phase::kPost: return "after the micro-batches: the optimizer step";
      case StageUnit::Phase::kForward:
      case StageUnit::Phase::kBackward:
        break;
    }
    return u.str() + ": micro-batch " + std::to_string(u.micro_batch) +
           (u.phase == StageUnit::Phase::kForward ? " forward" : " backward") + ", model chunk " +
           std::to_string(u.chunk);
  }

  // A pipelined program's step: each device runs the program of its stage
  // (a CpuEmitter of the stage graph, named like this one), chosen by its
  // coordinate on the pipe axis; each stage's program is a struct of its own
  // (Program::Step::StageN), as a whole program's is Program::Step.
  std::string pipelined_body() {
    const StagePlan& plan = *plan_stages_;
    CodeWriter st(0);
    st.line("// A pipelined program's step: each stage's program is a struct of its own, below.");
    st.open("struct Program::Step");
    for (int s = 0; s < plan.stages; ++s) st.line("struct Stage" + std::to_string(s) + ";");
    --st;
    st.line("};  // struct Program::Step");
    CodeWriter w(1);
    w.line("// Pipeline over " + quoted(plan.axis) + ": " + std::to_string(plan.stages) + " stages x " +
           std::to_string(plan.chunks_per_stage) + (plan.chunks_per_stage == 1 ? " model chunk, " : " model chunks, ") +
           std::to_string(plan.microbatches) + " micro-batches, schedule " + ir::schedule_name(plan.schedule) + ".");
    w.line("// Each device runs its stage's program; stages pass activations forward and their");
    w.line("// gradients back with send/recv to the device at the same place on the other axes.");
    w.open("switch (dev." + axis_var_.at(plan.axis) + ")");
    for (int s = 0; s < plan.stages; ++s) {
      std::vector<std::string> order;
      for (const StageUnit& u : plan.units[s])
        if (u.phase == StageUnit::Phase::kForward || u.phase == StageUnit::Phase::kBackward)
          order.push_back(u.str() + (plan.chunks_per_stage > 1 ? "c" + std::to_string(u.chunk) : ""));
      w.open("case " + std::to_string(s) + ":");
      w.line("// stage " + std::to_string(s) + " runs " + join(order, " "));
      CpuEmitter stage(stages_->at(s), o_, nullptr, nullptr, &g_);
      stage.units_ = &plan.units[s];
      stage.marks_ = marks_;
      stage.stage_ = s;
      stage.chunks_per_stage_ = plan.chunks_per_stage;
      for (const StageStep& step : plan.steps[s]) stage.node_unit_.push_back(step.unit);
      w.text(stage.forward_body(3));  // in the switch's case
      w.line("break;");
      w.close();
      st.line();
      st.text(stage.step_struct_);
      step_fns_.insert(step_fns_.end(), stage.step_fns_.begin(), stage.step_fns_.end());
    }
    w.line("default: break;");
    w.close("switch");
    step_struct_ = st.str();
    return w.str();
  }

  // The end of a training step: every updated parameter's persistent buffer
  // takes its new value, all at once (a value that is itself an updated
  // parameter is its value from the start of the step, as in execute.cpp).
  // New values are moved into place, copied only when one value feeds
  // several parameters or is a parameter's buffer.
  void emit_updates(CodeWriter& w) {
    std::set<int> targets;
    std::map<int, int> remaining;  // value -> updates still to read it
    for (auto& u : g_.updates) {
      targets.insert(u.target);
      ++remaining[u.value];
    }
    // Old values of updated parameters that another parameter takes: copied
    // out first, before any of them changes.
    std::map<int, std::string> snapshot;
    for (auto& u : g_.updates) {
      if (u.value == u.target || g_[u.value].op != Op::kParameter || !targets.count(u.value) ||
          snapshot.count(u.value))
        continue;
      const std::string t = locals_.user("old_" + var_[u.value]);
      const std::string n = std::to_string(ir::num_elements(g_[u.value].shape));
      w.line("rt::Buffer " + t + "(" + n + ", &mem, rt::uninitialized, rt::persistent);  // \"" +
             g_[u.value].name + "\" as the step found it");
      w.line("rt::copy(" + ptr(u.value) + ", " + t + ".data(), " + n + ");");
      snapshot[u.value] = t;
    }
    for (auto& u : g_.updates) {
      const Node& p = g_[u.target];
      const Node& v = g_[u.value];
      const std::string dst = "dev." + var_[u.target];
      const std::string n = std::to_string(ir::num_elements(p.shape));
      const bool last = --remaining[u.value] == 0;
      std::string src = v.op == Op::kParameter ? "\"" + v.name + "\"" : var_[u.value];
      w.line("// " + (v.loc.known() ? v.loc.str() + " " : "") + "\"" + p.name + "\" " +
             shape_comment(p) + " <- " + src);
      if (u.value == u.target) {
        w.line("// (keeps its value)");
      } else if (plan_.in_place_of[u.value] == u.target) {
        w.line("// (computed in place)");
      } else if (snapshot.count(u.value)) {
        const std::string t = snapshot[u.value];
        w.line(last ? dst + " = std::move(" + t + ");"
                    : "rt::copy(" + t + ".data(), " + dst + ".data(), " + n + ");");
      } else if (v.op == Op::kParameter || !last) {
        w.line("rt::copy(" + ptr(u.value) + ", " + dst + ".data(), " + n + ");");
      } else {
        w.line(dst + " = std::move(" + var_[u.value] + ");");
      }
    }
  }

  const ir::Graph& g_;
  const EmitOptions& o_;
  const Mesh& mesh_;
  const StagePlan* plan_stages_;              // pipelined: the stage plan
  const std::vector<ir::Graph>* stages_;      // pipelined: the stage programs
  const std::string pipe_axis_;               // pipelined (also in a stage's emitter): the axis
  std::map<std::string, std::vector<int>> holders_;  // pipelined: parameter path -> stages holding it
  // A stage's emitter: the unit (StagePlan::units) of each node, to title them.
  const std::vector<StageUnit>* units_ = nullptr;
  // The marks written so far (a stage's emitter adds to its program's), the
  // stage this emitter writes (-1: not a stage), and its graph's report
  // (made at the first collective, for the bytes).
  std::vector<EmittedMark> own_marks_;
  std::vector<EmittedMark>* marks_ = &own_marks_;
  int stage_ = -1;
  int chunks_per_stage_ = 1;  // a stage's emitter: the stage plan's
  std::optional<Report> report_;
  std::vector<int> node_unit_;
  // The step (split_step): its struct, its parts' definitions (qualified
  // name, text) in the order they run, and the values declare() has made
  // buffers for so far, in order.
  std::string step_struct_;
  struct StepFn {
    std::string name, text;
  };
  std::vector<StepFn> step_fns_;
  // Scanned layers' random streams: table name -> key literal per layer.
  std::map<std::string, std::vector<std::string>> layer_keys_;
  // The loops fold_layers made (Chunk::loop indexes them).
  struct Loop {
    int first = 0, last = 0, step = 1;  // the layers the loop runs, in order
  };
  std::vector<Loop> loops_;
  std::vector<int> declared_;
  const EmissionPlan ep_;
  const BufferPlan& plan_;
  const std::vector<std::string>& var_;
  const std::map<std::string, std::string>& axis_var_;
  const std::map<std::string, std::string>& field_;
  const std::map<std::string, std::string>& out_field_;
  const std::map<std::vector<std::string>, std::string>& group_var_;
  cpp::Names locals_;  // the plan's names plus the temporaries printed here
};

}  // namespace

std::string fill_template(const std::string& text,
                          const std::vector<std::pair<std::string, std::string>>& values,
                          const std::string& what) {
  std::map<std::string, std::string> map(values.begin(), values.end());
  std::set<std::string> used;
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t at = text.find('@', pos);
    if (at == std::string::npos) break;
    size_t end = at + 1;
    while (end < text.size() &&
           (std::isupper(static_cast<unsigned char>(text[end])) ||
            std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '_'))
      ++end;
    if (end == at + 1 || end >= text.size() || text[end] != '@') {
      out.append(text, pos, at + 1 - pos);
      pos = at + 1;
      continue;
    }
    const std::string key = text.substr(at + 1, end - at - 1);
    auto it = map.find(key);
    if (it == map.end())
      internal_error(what + " has placeholder @" + key + "@ that the emitter does not fill");
    used.insert(key);
    out.append(text, pos, at - pos);
    out += it->second;
    pos = end + 1;
  }
  out.append(text, pos, std::string::npos);
  for (auto& [k, v] : map)
    if (!used.count(k)) internal_error(what + " lacks placeholder @" + k + "@");
  return out;
}

std::string step_header_name(const std::string& stem) { return stem + "_step.h"; }

std::string source_file_name(const std::string& stem, int file) {
  return file == 0 ? stem + ".cpp" : stem + "_part" + std::to_string(file + 1) + ".cpp";
}

EmitTemplates load_templates(const std::string& dir) {
  auto read = [&](const std::string& file) {
    const std::string path = dir + "/" + file;
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error(SrcLoc(path, 1), "cannot read the emitter template " + file);
    std::ostringstream os;
    os << f.rdbuf();
    return os.str();
  };
  return {read("program.h"), read("program_step.h"), read("program.cpp"), read("program_part.cpp")};
}

namespace {

// The generated API passes f32 arrays, and i32 ones for ids and labels; a
// bf16 input or output is converted inside the program (astype), where the
// DSL line says so.
void check_io_types(const ir::Graph& partitioned) {
  for (const ir::Node& n : partitioned.nodes)
    if (n.op == ir::Op::kInput && n.dtype == ir::DType::kBF16)
      user_error(n.loc, "the CPU backend takes f32 and i32 inputs, not bf16: declare " +
                            ir::describe_value(n) + " f32 and convert it with astype()");
  for (const ir::Output& o : partitioned.outputs)
    if (partitioned[o.value].dtype != ir::DType::kF32)
      user_error(o.loc, "the CPU backend returns f32 outputs, not " +
                            std::string(ir::dtype_name(partitioned[o.value].dtype)) + ": output \"" +
                            o.name + "\" is " + ir::describe_value(partitioned[o.value]) +
                            "; convert it with astype(x, DType::kF32)");
}

}  // namespace

EmittedFiles emit_cpu(const ir::Graph& partitioned, const EmitOptions& options) {
  if (partitioned.pipeline)
    internal_error("emit_cpu: a pipelined program is emitted from its Lowered (stage programs)");
  check_io_types(partitioned);
  return CpuEmitter(partitioned, options).run();
}

EmittedFiles emit_cpu(const Lowered& lowered, const EmitOptions& options) {
  if (lowered.stage_graphs.empty()) return emit_cpu(lowered.partitioned, options);
  check_io_types(lowered.partitioned);
  return CpuEmitter(lowered.partitioned, options, &*lowered.stages, &lowered.stage_graphs).run();
}

}  // namespace sharc
