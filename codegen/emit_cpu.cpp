// The CPU renderer; see emit_cpu.h. CpuEmitter (emit_cpu_impl.h) takes
// fusion, buffers, last uses, names and the schedule from plan_emission()
// (emission_plan.h; its buffer plan is what the report replays to predict
// memory) and prints each template placeholder's text with the spelling
// helpers of cpp_writer.h. This file: run() and the step's structure (parts,
// files, scanned layers' loops, pipeline stages, the closing updates); the
// program's API text is in emit_cpu_api.cpp, the statements in
// emit_cpu_stmt.cpp.
#include "codegen/emit_cpu.h"

#include "codegen/emit_cpu_impl.h"

namespace sharc {

namespace emit_cpu_detail {

EmittedFiles CpuEmitter::run() {
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
                                      {"SHARC_SOURCE_NAME", source_file_name(stem, 0, o_.backend)},
                                      {"SHARC_DEVICE_FIELDS", device_fields()},
                                      {"SHARC_BACKEND_INCLUDES",
                                       cuda() ? "\n#include \"runtime/gpu/device_collectives.h\"\n#include \"runtime/gpu/device_ops.h\"\n"
                                                "#include \"runtime/gpu/gpu_world.h\""
                                              : ""},
                                      {"SHARC_BACKEND_ALIASES", cuda() ? "\nnamespace gpu = sharc::gpu;" : ""},
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
    std::set<std::string> defined;  // CUDA: each kernel once per file, before its first use there
    for (size_t i : in_file[k]) {
      for (const auto& [name, text] : step_fns_[i].kernels)
        if (defined.insert(name).second) t += "\n\n" + text;
      t += "\n\n" + step_fns_[i].text;
    }
    return t;
  };
  auto range = [&](int k) {
    const std::string& a = step_fns_[in_file[k].front()].name;
    const std::string& b = step_fns_[in_file[k].back()].name;
    return a == b ? a + "()" : a + "() to " + b + "()";
  };
  std::vector<std::string> elsewhere;
  for (int k = 1; k < files; ++k)
    if (!in_file[k].empty()) elsewhere.push_back(source_file_name(stem, k, o_.backend) + " (" + range(k) + ")");
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
                        comment_lines(head + "empty. The step fits in fewer files (" + source_file_name(stem, 0, o_.backend) +
                                          " says where it is).",
                                      3) +
                        "\n");
      continue;
    }
    const std::string title = head + range(k) + ".";
    f.parts.push_back(fill_template(o_.templates.part,
                                    with({{"SHARC_PART_TITLE", comment_lines(title, 3)},
                                          {"SHARC_SOURCE_NAME", source_file_name(stem, 0, o_.backend)},
                                          {"SHARC_STEP_HEADER_NAME", step_header_name(stem)},
                                          {"SHARC_STEP_PARTS", definitions(k).substr(1)}}),
                                    "templates/program_part.cpp"));
  }
  f.marks = std::move(*marks_);
  place_marks(f);
  return f;
}

std::string CpuEmitter::comment_lines(const std::string& text, size_t first_col) {
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

void CpuEmitter::place_marks(EmittedFiles& f) {
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

std::vector<CpuEmitter::Chunk> CpuEmitter::step_chunks() {
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
    c.kernels = std::move(pending_kernels_);
    pending_kernels_.clear();
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

std::pair<std::string, std::string> CpuEmitter::part_of(const Node& v) {
  const std::string phase =
      v.micro_batch == ir::kAfterMicroBatches ? "optimizer" : v.backward || v.remat ? "backward" : "forward";
  std::string block;
  if (v.op != Op::kInput && v.op != Op::kParameter && !v.name.empty())
    block = v.name.substr(0, v.name.find('/'));
  return {phase, block};
}

std::string CpuEmitter::unit_name(int unit) const {
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

std::string CpuEmitter::forward_body(int indent) {
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

void CpuEmitter::fold_layers(std::vector<Chunk>& chunks) {
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

void CpuEmitter::fold_group(std::vector<Chunk>& chunks, const std::vector<std::pair<size_t, size_t>>& segs, int step) {
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

std::string CpuEmitter::split_step(const std::vector<Chunk>& chunks, const std::string& tail, int indent) {
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
  if (cuda()) st.line("gpu::DeviceContext gpu_dev;  // the device's kernels, transfers and stream");
  st.line(type + "(rt::World& world, Device& dev_, rt::Communicator& comm_, rt::DeviceMemory& mem_,");
  st.line(std::string(type.size() + 1, ' ') + "rt::Timeline& timeline_, const Inputs& in_, Outputs& out_, int rank_)");
  st.line("    : world_(world), dev(dev_), comm(comm_), mem(mem_), timeline(timeline_), in(in_), out(out_), rank(rank_)" +
          std::string(cuda() ? ",\n      gpu_dev(gpu::device_context(world, rank_, kProgram, gpu::kSimulatorBuild))" : "") + " {}");
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
    StepFn f{qualified + "::" + parts[p].name, fn.str(), {}};
    for (int k : parts[p].chunks)  // CUDA: the kernels the part launches
      for (const auto& kernel : chunks[k].kernels)
        if (std::none_of(f.kernels.begin(), f.kernels.end(), [&](const auto& x) { return x.first == kernel.first; }))
          f.kernels.push_back(kernel);
    step_fns_.push_back(std::move(f));
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

std::string CpuEmitter::unit_title(const StageUnit& u) {
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

std::string CpuEmitter::pipelined_body() {
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

void CpuEmitter::emit_updates(CodeWriter& w) {
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
    w.line(call("copy") + ptr(u.value) + ", " + t + ".data(), " + n + ");");
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
                  : call("copy") + t + ".data(), " + dst + ".data(), " + n + ");");
    } else if (v.op == Op::kParameter || !last) {
      w.line(call("copy") + ptr(u.value) + ", " + dst + ".data(), " + n + ");");
    } else {
      w.line(dst + " = std::move(" + var_[u.value] + ");");
    }
  }
}

}  // namespace emit_cpu_detail

using emit_cpu_detail::CpuEmitter;

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

std::string source_file_name(const std::string& stem, int file, Backend backend) {
  const std::string ext = backend == Backend::kCuda ? ".cu" : ".cpp";
  return file == 0 ? stem + ext : stem + "_part" + std::to_string(file + 1) + ext;
}

const char* backend_name(Backend b) { return b == Backend::kCuda ? "cuda" : "cpu"; }

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
