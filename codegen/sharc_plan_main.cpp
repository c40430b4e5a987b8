// sharc-plan: the planner's ranked table for a model file, from the command
// line, with no CMake project of one's own and nothing generated:
//
//   sharc-plan samples/gpt2/model.cpp --program gpt2_train --devices 8
//   sharc-plan model.cpp --program train --devices 64 --machine h100-ib
//              --memory 72GiB --backend cuda --option layers=24   (one line)
//
// The planner needs the traced program, and the program is C++: so
// sharc-plan builds the model's generator (the model file linked with
// sharc::generator_main, as sharc_add_program does, sharc-lift included
// for SHARC_ELEMENTWISE models) in a small CMake project of its own in a
// work folder, once per model file, and runs it with --mesh auto --plan.
// Later calls rebuild only what the model's edits touched, so trying
// another budget, machine or device count costs the planner's time alone.
//
// The project finds sharc as a package: the install's
// (<prefix>/lib/cmake/sharc, beside this program's bin/) or, from a build
// tree, <build>/sharc-build (cmake/install.cmake exports both).
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/cli.h"

namespace {

namespace fs = std::filesystem;

struct Args {
  std::string model, program, memory, machine = "cpu", backend = "cpu", work, bucket_bytes;
  int devices = 0;
  std::vector<std::string> options, includes;
  bool verbose = false;
};

[[noreturn]] void fail(const std::string& what) {
  std::cerr << "sharc-plan: error: " << what << "\n";
  std::exit(1);
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs argv; its output goes to `log` (appended) unless `log` is empty.
// Returns the exit status (128 + the signal when killed).
int run(const std::vector<std::string>& argv, const fs::path& log) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) fail("cannot start " + argv[0]);
  if (pid == 0) {
    if (!log.empty()) {
      if (!std::freopen(log.c_str(), "a", stdout)) std::_Exit(126);
      dup2(fileno(stdout), fileno(stderr));
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "sharc-plan: cannot run %s\n", argv[0].c_str());
    std::_Exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) fail("lost " + argv[0] + ": " + std::strerror(errno));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The folder holding sharcConfig.cmake: the install's beside this program,
// else the build tree's it was built in.
fs::path package_dir(const char* argv0) {
  std::error_code ec;
  const fs::path self = fs::canonical("/proc/self/exe", ec);
  const fs::path exe = ec ? fs::path(argv0) : self;
  fs::path installed;
  for (const char* lib : {"lib", "lib64"}) {
    installed = exe.parent_path().parent_path() / lib / "cmake" / "sharc";
    if (fs::exists(installed / "sharcConfig.cmake")) return installed;
  }
  const fs::path build = SHARC_PLAN_BUILD_PACKAGE_DIR;
  if (fs::exists(build / "sharcConfig.cmake")) return build;
  fail("sharc's package is neither at " + installed.string() + " (an install) nor at " + build.string() +
       " (the build tree this sharc-plan was built in)");
}

// The work folder: --work, else $XDG_CACHE_HOME (or ~/.cache)/sharc-plan/
// STEM-HASH, one per model file and sharc package (a build tree's and an
// install's generators are not mixed).
fs::path work_dir(const Args& a, const fs::path& model, const fs::path& package) {
  if (!a.work.empty()) return fs::absolute(a.work);
  fs::path cache;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    cache = x;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    cache = fs::path(h) / ".cache";
  } else {
    cache = fs::temp_directory_path();
  }
  char hash[17];
  const std::string key = model.string() + "\n" + package.string() + "\n" + SHARC_PLAN_CXX_COMPILER;
  std::snprintf(hash, sizeof hash, "%016zx", std::hash<std::string>{}(key));
  return cache / "sharc-plan" / (model.stem().string() + "-" + hash);
}

// A CMake bracket argument holding `text` verbatim, whatever it contains.
std::string bracket(const std::string& text) {
  std::string eq = "=";
  while (text.find("]" + eq + "]") != std::string::npos) eq += "=";
  return "[" + eq + "[" + text + "]" + eq + "]";
}

// The project that builds the model's generator (what sharc_add_program's
// first call for a model file does). A model marked SHARC_ELEMENTWISE runs
// through sharc-lift; deciding that here rewrites the project, and so
// reconfigures it, when an edit adds or removes the mark.
std::string project_text(const fs::path& model, const fs::path& package, const std::vector<fs::path>& includes) {
  const std::string m = bracket(model.string());
  std::string text = "# Written by sharc-plan: the generator of " + model.string() +
                     ".\ncmake_minimum_required(VERSION 3.25)\n"
                     "project(sharc_plan LANGUAGES CXX)\n"
                     "set(sharc_DIR " +
                     bracket(package.string()) +
                     " CACHE PATH \"sharc's package\" FORCE)\n"
                     "find_package(sharc CONFIG REQUIRED)\n"
                     "add_executable(generator " +
                     m + ")\ntarget_link_libraries(generator PRIVATE sharc::generator_main)\n";
  for (const fs::path& i : includes) text += "target_include_directories(generator PRIVATE " + bracket(i.string()) + ")\n";
  if (read(model).find("SHARC_ELEMENTWISE") != std::string::npos)
    text += "sharc_lift(TARGET generator SOURCE " + m + ")\n";
  return text;
}

// From the first line that reports an error (a compiler's "error:", ninja's
// "FAILED:", CMake's "CMake Error") on, at most `lines` lines; the last
// `lines` lines when none does.
std::string errors_of(const std::string& log, int lines) {
  size_t at = std::string::npos;
  for (const char* mark : {"FAILED:", "error:", "CMake Error"}) at = std::min(at, log.find(mark));
  if (at == std::string::npos) {
    at = log.size();
    for (int n = 0; n <= lines && at > 0; ++n) {
      const size_t nl = log.rfind('\n', at - 1);
      if (nl == std::string::npos) return log;
      at = nl;
    }
    return log.substr(at + 1);
  }
  at = log.rfind('\n', at);
  at = at == std::string::npos ? 0 : at + 1;
  size_t end = at;
  for (int n = 0; n < lines && end != std::string::npos && end < log.size(); ++n) end = log.find('\n', end + 1);
  return log.substr(at, end == std::string::npos ? std::string::npos : end - at + 1);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"The planner's ranked table (MESH auto) for a program of a model file, without a CMake project: "
               "builds the model's generator once in a work folder and runs it with --plan.",
               "sharc-plan"};
  app.add_option("model", a.model, "the model file (the SHARC_PROGRAMs' source)")->required();
  app.add_option("--program", a.program, "the SHARC_PROGRAM to plan")->required();
  app.add_option("--devices", a.devices, "the device count to plan for")
      ->required()
      ->check(sharc::cli::at_least(1));
  app.add_option("--memory", a.memory, "the memory budget per device (16GiB, 512MiB, bytes); default none");
  app.add_option("--bucket-bytes", a.bucket_bytes,
                 "the gradient buckets' size (1MiB, 256KiB, bytes), as BUCKET_BYTES; default: searched");
  app.add_option("--machine", a.machine, "the machine the plan is costed on (cpu, h100-nvlink, h100-ib, or a .json file)")
      ->capture_default_str();
  app.add_option("--backend", a.backend, "whose costs: the CPU program's or the CUDA program's (its fused kernels)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--option", a.options, "NAME=VALUE for ProgramBuilder::option, as sharc_add_program's OPTIONS");
  app.add_option("--include", a.includes, "a folder the model's #includes are found in (as include_directories)");
  app.add_option("--work", a.work, "where the generator is built (default: ~/.cache/sharc-plan/MODEL-HASH)");
  app.add_flag("--verbose", a.verbose, "show the generator's build as it runs");
  if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;

  std::error_code ec;
  const fs::path model = fs::canonical(a.model, ec);
  if (ec || !fs::is_regular_file(model)) fail(a.model + ": no such model file");
  const fs::path package = package_dir(argv[0]);
  const fs::path work = work_dir(a, model, package);
  fs::create_directories(work, ec);
  if (ec) fail("cannot create the work folder " + work.string() + ": " + ec.message());
  // One run at a time in a work folder: another waits for the build.
  const int lock = open((work / ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (lock < 0 || flock(lock, LOCK_EX) != 0) fail("cannot lock the work folder " + work.string());

  // The project, rewritten only when it changes (a rewrite reconfigures).
  std::vector<fs::path> includes;
  for (const std::string& i : a.includes) {
    if (!fs::is_directory(i)) fail("--include " + i + ": no such folder");
    includes.push_back(fs::canonical(i));
  }
  const std::string project = project_text(model, package, includes);
  if (read(work / "CMakeLists.txt") != project) std::ofstream(work / "CMakeLists.txt", std::ios::binary) << project;
  const fs::path build = work / "build", log = a.verbose ? fs::path() : work / "build.log";
  if (!log.empty()) fs::remove(log, ec);
  auto built = [&](int status, const std::string& what) {
    if (status == 0) return;
    if (!log.empty()) std::cerr << errors_of(read(log), 60);
    fail(what + " failed (exit " + std::to_string(status) + ")" +
         (log.empty() ? "" : "; its output is above and in " + log.string()));
  };
  // Configured once; a failed configure leaves no stamp and runs again.
  const fs::path configured = build / "sharc-plan-configured";
  if (!fs::exists(configured) || !fs::exists(build / "CMakeCache.txt")) {
    if (!a.verbose) std::cerr << "sharc-plan: building the generator of " << model.filename().string() << " in "
                              << work.string() << " (once)\n";
    built(run({SHARC_PLAN_CMAKE, "-S", work.string(), "-B", build.string(), "-G", SHARC_PLAN_CMAKE_GENERATOR,
               "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_CXX_COMPILER=" SHARC_PLAN_CXX_COMPILER},
              log),
          "configuring the generator's project");
    std::ofstream(configured) << "configured\n";
  }
  built(run({SHARC_PLAN_CMAKE, "--build", build.string(), "--target", "generator", "--config", "Release"}, log),
        "building the generator of " + model.string());

  // Single-config generators put it in the build folder, multi-config ones
  // in Release/.
  const fs::path generator = fs::exists(build / "Release" / "generator") ? build / "Release" / "generator"
                                                                         : build / "generator";
  std::vector<std::string> gen = {generator.string(), "--program", a.program, "--mesh", "auto",
                                  "--devices", std::to_string(a.devices), "--plan", "--machine", a.machine,
                                  "--backend", a.backend, "--source-root", model.parent_path().string()};
  if (!a.memory.empty()) gen.insert(gen.end(), {"--memory", a.memory});
  if (!a.bucket_bytes.empty()) gen.insert(gen.end(), {"--bucket-bytes", a.bucket_bytes});
  for (const std::string& o : a.options) gen.insert(gen.end(), {"--option", o});
  return run(gen, {});
}
