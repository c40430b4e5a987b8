// main() of a sharc generator: a model file (which registers programs with
// SHARC_PROGRAM) linked with this library becomes the executable that cmake's
// sharc_add_program() runs at build time:
//
//   model.generator --program dot_relu_dot --mesh data=2,model=4 [--devices 8]
//                   --out-dir DIR --templates DIR [--name STEM] [--namespace NS]
//                   [--cpp-files N] [--dump-ir DIR] [--source-root DIR]...
//                   [--option NAME=VALUE]... [--called-from FILE[:LINE]]
//                   [--backend cpu|cuda]
//   model.generator --program dot_relu_dot --mesh data=2,model=4 --report
//   model.generator --program dot_relu_dot --mesh data=2,model=4 --explain --templates DIR
//   model.generator --program dot_relu_dot --mesh auto --devices 8 [--memory 16GiB]
//                   [--machine cpu|h100-nvlink|h100-ib|FILE.json] [--plan] ...
//
// It traces the program, lowers it for the mesh and writes DIR/STEM.h (the
// API), DIR/STEM_step.h (the private header of the sources), DIR/STEM.cpp and,
// with --cpp-files N > 1, DIR/STEM_part2.cpp .. STEM_partN.cpp (the step's
// functions spread over N files to compile in parallel, those a small
// program does not need written empty; codegen/emit_cpu.h), and
// DIR/STEM_explain.txt (STEM defaults to the program name, NS to
// sharc_gen::STEM), plus numbered per-pass IR dumps with --dump-ir. A
// file whose bytes are already what it would write is left alone, so the
// build (which restats generated files) does not compile it again. With
// --report it writes nothing: it prints the predicted costs of the program on
// the mesh (each parameter's layout and local shape, every collective with
// its bytes per device, each device's peak memory; codegen/report.h) and
// exits. With --explain it writes nothing either: it prints what STEM_explain.txt
// holds, each model line with the kernels and collectives it became and
// their lines in the sources (codegen/explain.h). A mistake in the model
// (sharc::Error) prints `file:line:col: error: ...` to stderr, with the model's
// line and a caret under the call when the file is found (as recorded, or
// under a --source-root: sharc_add_program passes the project's root, since
// recorded paths are relative to it), exits 1, and leaves no output: the
// files are written to temporaries and renamed only
// once everything succeeded, and a failure also removes the outputs of an
// earlier run, so a failed build never compiles stale generated code.
// --called-from names the sharc_add_program call that asked for this run
// (its CMakeLists.txt and line): every error then ends with a note there.
// --mesh auto plans the mesh (codegen/plan.h): every split of --devices
// over the axes the program uses (with its schedule, micro-batch count,
// remat and rings), costed on --machine (codegen/machine.h), the fastest
// whose peak memory per device fits --memory generated, and the ranked
// table written to DIR/STEM_plan.txt; with --plan it prints the table and
// writes nothing.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/cli.h"
#include "codegen/emit_cpu.h"
#include "codegen/explain.h"
#include "codegen/pipeline.h"
#include "codegen/plan.h"
#include "codegen/report.h"
#include "dsl/program.h"

namespace {

namespace fs = std::filesystem;

struct Args {
  std::string program, mesh, out_dir, templates, dump_ir, cpp_namespace, name;
  std::vector<std::string> source_roots;  // where relative DSL file names are found
  std::vector<std::string> options;       // NAME=VALUE, for ProgramBuilder::option
  std::string called_from;                // the sharc_add_program call: CMakeLists.txt[:line]
  int devices = 0;  // 0: the product of the mesh
  int cpp_files = 1;  // the most .cpp files the step is spread over
  bool report = false;  // print the predicted costs instead of generating
  bool explain = false;  // print the model-line map instead of generating
  sharc::Backend backend = sharc::Backend::kCpu;  // --backend: the sources' kind (.cpp or .cu)
  std::string schedule_svg;  // with --report, a pipelined program's schedule picture goes here
  // --mesh auto: the budget per device ("" none), the machine, and --plan
  // (print the ranked table instead of generating).
  std::string memory, machine = "cpu";
  bool plan = false;
  // --bucket-bytes: the gradient buckets' size ("" the default, or with
  // --mesh auto the planner's choice).
  std::string bucket_bytes;
  // --candidate K: generate the plan's K-th candidate that fits (0 is its
  // choice) instead of its choice, so a benchmark can measure the ranking.
  int candidate = -1;
};

// The command line (codegen/cli.h). Returns -1 to go on with `a` filled, or
// the status main() returns (0 after --help, 2 after a mistake).
int parse_args(int argc, char** argv, Args& a) {
  CLI::App app{
      "A sharc generator: traces a program of the model file it was linked with, lowers it for a mesh "
      "and writes its per-device sources (run by sharc_add_program at build time); --report prints "
      "its predicted costs instead, --explain its model-line map.",
      fs::path(argv[0]).filename().string()};
  app.add_option("--program", a.program, "the SHARC_PROGRAM to generate")->required();
  sharc::cli::add_mesh(app, a.mesh, "the device mesh, or auto: the planner picks it for --devices")->required();
  app.add_option("--out-dir", a.out_dir, "where the sources are written");
  app.add_option("--templates", a.templates, "sharc's templates/ folder");
  app.add_option("--devices", a.devices, "the device count (default: the mesh's product)")
      ->check(sharc::cli::at_least(1));
  app.add_option("--name", a.name, "the files' stem (default: the program's name)");
  app.add_option("--namespace", a.cpp_namespace, "the C++ namespace (default: sharc_gen::STEM)");
  app.add_option("--cpp-files", a.cpp_files, "the most .cpp files the step is spread over")
      ->check(sharc::cli::whole_number(1, 1000))
      ->capture_default_str();
  app.add_option("--dump-ir", a.dump_ir, "write the IR after every pass here");
  app.add_option("--source-root", a.source_roots, "where relative model file names are found");
  app.add_option("--option", a.options, "NAME=VALUE for ProgramBuilder::option");
  app.add_option("--called-from", a.called_from, "the sharc_add_program call (FILE[:LINE]) errors point to");
  std::string backend = "cpu";
  app.add_option("--backend", backend, "the sources' kind: .cpp (cpu) or .cu (cuda)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--schedule-svg", a.schedule_svg, "with --report: a pipelined program's schedule picture");
  CLI::Option* report = app.add_flag("--report", a.report, "print the predicted costs and write nothing");
  app.add_flag("--explain", a.explain, "print the model-line map and write nothing")->excludes(report);
  app.add_option("--memory", a.memory, "with --mesh auto: the memory budget per device (16GiB, 512MiB, bytes)");
  app.add_option("--machine", a.machine,
                 "with --mesh auto: the machine the plan is costed on (cpu, h100-nvlink, h100-ib, or a .json file)")
      ->capture_default_str();
  app.add_option("--bucket-bytes", a.bucket_bytes,
                 "the most bytes one gradient bucket's all-reduce carries (1MiB, 256KiB, bytes; default 25MiB, "
                 "or with --mesh auto the planner's choice)");
  app.add_flag("--plan", a.plan, "with --mesh auto: print the ranked plans and write nothing");
  app.add_option("--candidate", a.candidate,
                 "with --mesh auto: generate the plan's K-th candidate that fits (0: its choice) instead of its choice")
      ->check(sharc::cli::whole_number(0, 1000));
  if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;
  if (a.mesh != "auto" && (a.plan || !a.memory.empty() || a.candidate >= 0))
    return sharc::cli::fail(app, "--plan, --memory and --candidate are for --mesh auto");
  if (a.mesh == "auto" && a.devices == 0)
    return sharc::cli::fail(app, "--mesh auto needs --devices: the device count to plan for");
  if (a.plan) a.report = true;  // writes nothing either
  a.backend = backend == "cuda" ? sharc::Backend::kCuda : sharc::Backend::kCpu;
  if (a.out_dir.empty() && !a.report && !a.explain) return sharc::cli::fail(app, "--out-dir is required");
  if (a.templates.empty() && !a.report) return sharc::cli::fail(app, "--templates is required");
  if (a.name.empty()) a.name = a.program;
  if (a.cpp_namespace.empty()) a.cpp_namespace = "sharc_gen::" + a.name;
  return -1;
}

std::string registered_programs() {
  std::string s;
  for (auto& [name, fn] : sharc::ProgramRegistry::all()) s += (s.empty() ? "" : ", ") + name;
  return s.empty() ? "(none: does the model file use SHARC_PROGRAM?)" : s;
}

// True when `path` holds exactly `text`.
bool holds(const fs::path& path, const std::string& text) {
  std::error_code ec;
  if (fs::file_size(path, ec) != text.size() || ec) return false;
  std::ifstream f(path, std::ios::binary);
  const std::string have((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return have == text;
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) throw std::runtime_error("cannot write " + path.string());
}

// The outputs of one run, and how to publish or discard them together.
class Outputs {
 public:
  // STEM.h, STEM_step.h, the `cpp_files` sources and STEM_explain.txt.
  Outputs(const fs::path& dir, const std::string& stem, int cpp_files, sharc::Backend backend)
      : finals_{dir / (stem + ".h"), dir / sharc::step_header_name(stem)} {
    for (int k = 0; k < cpp_files; ++k) finals_.push_back(dir / sharc::source_file_name(stem, k, backend));
    finals_.push_back(dir / (stem + "_explain.txt"));
    for (auto& f : finals_) temps_.push_back(fs::path(f.string() + ".tmp"));
  }
  // All written, or none: each goes to a temporary first. A file that is
  // already right keeps its time stamp.
  void write(const std::vector<std::string>& texts) {
    fs::create_directories(finals_[0].parent_path());
    std::vector<bool> same(finals_.size());
    for (size_t i = 0; i < finals_.size(); ++i) {
      same[i] = holds(finals_[i], texts[i]);
      if (!same[i]) write_file(temps_[i], texts[i]);
    }
    for (size_t i = 0; i < finals_.size(); ++i)
      if (!same[i]) fs::rename(temps_[i], finals_[i]);
  }
  // Removes temporaries and any earlier outputs: after a failure the build must
  // not find (and compile) a previous run's files.
  void discard() noexcept {
    std::error_code ec;
    for (auto& f : temps_) fs::remove(f, ec);
    for (auto& f : finals_) fs::remove(f, ec);
  }

 private:
  std::vector<fs::path> finals_, temps_;
};

int run(const Args& a) {
  auto it = sharc::ProgramRegistry::all().find(a.program);
  if (it == sharc::ProgramRegistry::all().end())
    throw sharc::Error(sharc::SrcLoc(),
                       "no program named '" + a.program +
                           "' is registered; this generator has: " + registered_programs());
  const sharc::SrcLoc where = sharc::ProgramRegistry::locations()[a.program];

  if (!a.dump_ir.empty() && fs::is_directory(a.dump_ir))
    for (auto& e : fs::directory_iterator(a.dump_ir))  // dumps of an earlier pipeline
      if (e.path().extension() == ".ir") fs::remove(e.path());

  std::string option_text;
  for (const std::string& o : a.options) option_text += (option_text.empty() ? "" : ",") + o;
  const sharc::ProgramOptions given = sharc::parse_program_options(option_text);
  // --mesh auto chooses the micro-batch count too when the program reads it
  // and the build did not give it (plan.h, Retrace).
  auto [traced, retrace] = sharc::trace_for_plan(a.program, it->second, given);
  sharc::PipelineOptions options;
  options.gpu_kernels = a.backend == sharc::Backend::kCuda;
  if (!a.bucket_bytes.empty()) {
    const std::optional<uint64_t> bytes = sharc::parse_bytes(a.bucket_bytes);
    if (!bytes)
      throw sharc::Error(sharc::SrcLoc(),
                         "BUCKET_BYTES " + a.bucket_bytes + " is not a size: write 1MiB, 256KiB or a byte count");
    options.bucket_bytes = static_cast<size_t>(*bytes);
  }
  // The mesh comes from the build (or the planner), not from a DSL line: its
  // errors carry no location and main() prefixes them with the flag.
  std::string mesh_text = a.mesh, plan_text;
  std::optional<sharc::PlanCandidate> chosen;  // --mesh auto: the plan's choice
  if (a.mesh == "auto") {
    std::optional<uint64_t> budget = 0;
    if (!a.memory.empty() && !(budget = sharc::parse_bytes(a.memory)))
      throw sharc::Error(sharc::SrcLoc(), "MEMORY " + a.memory + " is not a size: write 16GiB, 512MiB or a byte count");
    const sharc::PlanMachine machine = sharc::load_machine(a.machine);
    const sharc::Plan plan = sharc::plan(a.program, traced, a.devices, *budget, machine, options, retrace);
    plan_text = sharc::format_plan(plan);
    if (a.plan) {
      std::cout << plan_text;
      return 0;
    }
    if (plan.chosen < 0) {
      // Nothing fits: the first candidate is the one of the smallest peak,
      // unless none partitions (plan.h).
      const sharc::PlanCandidate* smallest =
          plan.candidates.front().partitions ? &plan.candidates.front() : nullptr;
      throw sharc::Error(sharc::SrcLoc(),
                         smallest ? "no plan fits MEMORY " + a.memory + " per device: the smallest peak is " +
                                        std::to_string(smallest->peak_bytes) + " bytes, on MESH \"" +
                                        smallest->mesh + "\" (--plan shows every candidate)"
                                  : "no split of " + std::to_string(a.devices) + " devices over the axes " +
                                        "the program uses partitions it:\n" + plan_text);
    }
    chosen = plan.candidates[plan.chosen];
    if (a.candidate >= 0) {
      const int fitting = plan.fitting();
      if (a.candidate >= fitting)
        throw sharc::Error(sharc::SrcLoc(), "CANDIDATE " + std::to_string(a.candidate) + ": the plan has " +
                                                std::to_string(fitting) + " candidates that fit, numbered 0 to " +
                                                std::to_string(fitting - 1) + " (--plan ranks them)");
      chosen = plan.candidates[a.candidate];
    }
    mesh_text = chosen->mesh;
    if (a.report) std::cout << plan_text << "\n";
  }
  const sharc::Mesh mesh = sharc::Mesh::parse(mesh_text, a.devices, sharc::SrcLoc());
  options.dump_dir = a.dump_ir;
  // The planner's choice is lowered as it was planned (its schedule, remat
  // and rings on top of the options).
  if (chosen && chosen->microbatches > 0) traced = retrace(chosen->microbatches);
  sharc::Lowered lowered = chosen ? sharc::lower_candidate(traced, *chosen, a.devices, options)
                                  : sharc::lower(std::move(traced), mesh, options);
  if (a.report) {
    std::cout << sharc::format_report(sharc::predict(lowered));
    if (lowered.stages && !a.schedule_svg.empty()) {
      // The schedule on the virtual clock, with equal per-layer costs.
      const sharc::StageTimeline t = sharc::simulate_stages(
          *lowered.stages, lowered.partitioned, sharc::layer_unit_costs(*lowered.stages, lowered.partitioned),
          [](int) { return 0.0; });
      const fs::path svg(a.schedule_svg);
      if (svg.has_parent_path()) fs::create_directories(svg.parent_path());
      std::ofstream file(svg);
      file << sharc::schedule_svg(*lowered.stages, t, a.program + " on " + mesh_text);
      if (!file) throw std::runtime_error("cannot write " + a.schedule_svg);
      std::cout << "\nThe pipeline schedule, drawn: " << a.schedule_svg << "\n";
    }
    return 0;
  }

  sharc::EmitOptions eo;
  eo.program = a.program;
  eo.cpp_namespace = a.cpp_namespace;
  eo.header_name = a.name + ".h";
  eo.model_file = where.file;
  // As the header's first line shows them: a file an option names (HF_CONFIG's
  // config.json) relative to the top project, so the text is the same in
  // every checkout.
  std::string shown_options;
  for (std::string o : a.options) {
    for (const std::string& root : a.source_roots) {
      const std::string prefix = "=" + (root.ends_with('/') ? root : root + "/");
      if (const size_t at = o.find(prefix); at != std::string::npos) o = o.substr(0, at + 1) + o.substr(at + prefix.size());
    }
    shown_options += (shown_options.empty() ? "" : ",") + o;
  }
  eo.options = shown_options;
  eo.files = a.cpp_files;
  eo.backend = a.backend;
  eo.templates = sharc::load_templates(a.templates);
  const sharc::EmittedFiles files = sharc::emit_cpu(lowered, eo);
  const std::string map =
      sharc::explain(lowered, files, {.program = a.program, .model_file = where.file, .stem = a.name, .backend = a.backend});
  if (a.explain) {
    std::cout << map;
    return 0;
  }

  Outputs out(a.out_dir, a.name, a.cpp_files, a.backend);
  std::vector<std::string> texts = {files.header, files.step_header, files.source};
  texts.insert(texts.end(), files.parts.begin(), files.parts.end());
  texts.push_back(map);
  try {
    out.write(texts);
    // The planner's table beside the sources it chose.
    if (!plan_text.empty()) {
      const fs::path plan_file = fs::path(a.out_dir) / (a.name + "_plan.txt");
      if (!holds(plan_file, plan_text)) write_file(plan_file, plan_text);
    }
  } catch (...) {
    out.discard();
    throw;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (const int code = parse_args(argc, argv, args); code >= 0) return code;
  Outputs outputs(args.out_dir, args.name, args.cpp_files, args.backend);
  try {
    return run(args);
  } catch (const sharc::Error& e) {
    if (!args.report && !args.explain) outputs.discard();  // --report and --explain write nothing
    if (e.loc().known()) {
      std::cerr << sharc::render_diagnostic(e, args.source_roots);
    } else {
      // Not a DSL line (the mesh flag, an unknown program): name what the
      // build asked for, as sharc_add_program(NAME ...) spelled it.
      std::cerr << "sharc: " << args.name << " (program " << args.program << " on mesh "
                << args.mesh << "): error: " << e.message() << "\n";
    }
    if (!args.called_from.empty()) {
      std::string options;
      for (const std::string& o : args.options) options += " " + o;
      std::cerr << args.called_from << ": note: sharc_add_program(" << args.name << ") asked for program "
                << args.program << " on mesh " << args.mesh << (options.empty() ? "" : " with OPTIONS" + options)
                << "\n";
    }
    return 1;
  } catch (const std::exception& e) {
    if (!args.report && !args.explain) outputs.discard();  // --report and --explain write nothing
    std::cerr << "sharc generator: " << e.what() << "\n";
    return 1;
  }
}
