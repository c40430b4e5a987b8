// bench_compile: what a model's depth costs at build time. For each layer
// count and mesh it runs the GPT sample's generator (the generation-time
// option "layers") into a scratch folder, the step spread over --cpp-files
// sources as sharc_add_program does (CPP_FILES, 4 by default), and compiles
// each source the way sharc_add_program would, one at a time on one core at
// -O2, then prints per run:
//   generator s      the generator's wall time
//   lines            lines of the generated sources and private header
//   longest fn       lines of the longest generated function
//   files            the sources that hold code (the others are empty)
//   compile s        the compilers' wall time, all sources one after another
//   slowest s        the slowest source's: the build's wall time with a core
//                    per source
//   compiler MiB     the largest compiler's peak resident memory (getrusage)
// A compile still running after --timeout seconds is stopped and reported as
// "> N". Nothing is checked: the numbers are the output (issue 17 tracks
// them, docs/benchmarks.md shows a run).
//
//   bench_compile --generator G --templates DIR --cxx C++ --include DIR...
//                 [--program gpt2_train] [--layers 2,4,8] [--mesh data=2,model=4]...
//                 [--option scan=1]... [--cpp-files 4] [--flags "-O2 -std=c++20"] [--timeout 900]
//                 [--work DIR]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "codegen/cli.h"

namespace {

namespace fs = std::filesystem;

struct Args {
  std::string generator, templates, cxx, program = "gpt2_train", flags = "-O2 -std=c++20", work;
  std::vector<std::string> includes, meshes, options;  // options: the generator's --option NAME=VALUE
  std::vector<int> layers = {2, 4, 8};
  int cpp_files = 4;
  double timeout_s = 900;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, sep);)
    if (!part.empty()) out.push_back(part);
  return out;
}

// The command line (codegen/cli.h). Returns -1 to go on with `a` filled, or
// the status main() returns (0 after --help, 2 after a mistake).
int parse(int argc, char** argv, Args& a) {
  CLI::App app{"Build time and peak memory of generating and compiling a program at several depths.",
               "bench_compile"};
  app.add_option("--generator", a.generator, "the model file's generator executable")->required();
  app.add_option("--templates", a.templates, "sharc's templates/ folder")->required();
  app.add_option("--cxx", a.cxx, "the C++ compiler")->required();
  app.add_option("--include", a.includes, "include folders for the generated sources");
  app.add_option("--program", a.program, "the SHARC_PROGRAM")->capture_default_str();
  app.add_option("--layers", a.layers, "the depths to build (option layers=N)")->delimiter(',')->capture_default_str();
  app.add_option("--mesh", a.meshes, "meshes to build for (default: data=2,model=4)");
  app.add_option("--option", a.options, "NAME=VALUE passed to the generator");
  app.add_option("--cpp-files", a.cpp_files, "the generator's --cpp-files")
      ->check(sharc::cli::at_least(1))
      ->capture_default_str();
  app.add_option("--flags", a.flags, "the compiler's flags (give them as --flags=\"-O2 ...\")")->capture_default_str();
  app.add_option("--timeout", a.timeout_s, "seconds before a build is stopped")
      ->check(sharc::cli::non_negative())
      ->capture_default_str();
  app.add_option("--work", a.work, "where the builds happen (default: a temporary folder)");
  if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;
  if (a.meshes.empty()) a.meshes = {"data=2,model=4"};
  if (a.work.empty()) a.work = (fs::temp_directory_path() / "sharc_bench_compile").string();
  return -1;
}

struct Run {
  int status = -1;       // exit status, -1 when stopped at the timeout
  double seconds = 0;
  long max_rss_kib = 0;  // peak resident memory of the process or its largest child
};

// Runs argv to completion (or `timeout_s`), its output to `log`.
Run run(const std::vector<std::string>& argv, const std::string& log, double timeout_s) {
  std::fflush(stdout);  // else the child inherits (and writes again) what is buffered
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    if (f) dup2(fileno(stdout), STDERR_FILENO);
    std::vector<char*> args;
    for (const std::string& s : argv) args.push_back(const_cast<char*>(s.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::perror("exec");
    _exit(127);
  }
  Run r;
  for (;;) {
    int status = 0;
    rusage usage{};
    const pid_t done = wait4(pid, &status, WNOHANG, &usage);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (done == pid) {
      r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      r.seconds = elapsed;
      // Linux's wait4 reports the largest of the process and the children it
      // waited for: the compiler proper (cc1plus) under the g++ driver.
      r.max_rss_kib = usage.ru_maxrss;
      return r;
    }
    if (elapsed > timeout_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.seconds = elapsed;
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Adds the lines of `file` to `lines`, and raises `longest` to its longest
// function's: a definition starts at a line "<type> Program::<name>(" in
// column 0 and ends at the first "}" in column 0. True when it holds code
// (a source the step does not need is comments only).
bool count_lines(const fs::path& file, long& lines, long& longest) {
  std::ifstream in(file);
  long n = 0, start = -1;
  bool code = false;
  for (std::string l; std::getline(in, l);) {
    ++n;
    code = code || (!l.empty() && l.rfind("//", 0) != 0);
    if (start < 0 && !l.empty() && l[0] != ' ' && l.find("Program::") != std::string::npos && l.find('(') != std::string::npos)
      start = n;
    if (start >= 0 && !l.empty() && l[0] == '}') {
      longest = std::max(longest, n - start + 1);
      start = -1;
    }
  }
  lines += n;
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (const int code = parse(argc, argv, a); code >= 0) return code;
  fs::create_directories(a.work);
  std::string options;
  for (const std::string& o : a.options) options += " " + o;
  std::printf("bench_compile: program %s%s%s, compiled with %s %s, one compiler process at a time\n",
              a.program.c_str(), options.empty() ? "" : " with options", options.c_str(), a.cxx.c_str(), a.flags.c_str());
  std::printf("%-16s %6s %12s %9s %11s %6s %10s %10s %13s\n", "mesh", "layers", "generator s", "lines", "longest fn",
              "files", "compile s", "slowest s", "compiler MiB");
  for (const std::string& mesh : a.meshes) {
    for (int layers : a.layers) {
      const fs::path dir = fs::path(a.work) / (std::to_string(layers) + "_" + std::to_string(std::hash<std::string>{}(mesh) % 100000));
      fs::remove_all(dir);
      fs::create_directories(dir);
      std::vector<std::string> gen_argv = {a.generator, "--program", a.program, "--mesh", mesh, "--name", "prog",
                                           "--out-dir", dir.string(), "--templates", a.templates,
                                           "--cpp-files", std::to_string(a.cpp_files),
                                           "--option", "layers=" + std::to_string(layers)};
      for (const std::string& o : a.options) {
        gen_argv.push_back("--option");
        gen_argv.push_back(o);
      }
      const Run gen = run(gen_argv, (dir / "generator.log").string(), a.timeout_s);
      if (gen.status != 0) {
        std::printf("%-16s %6d generator failed (exit %d), see %s\n", mesh.c_str(), layers, gen.status,
                    (dir / "generator.log").c_str());
        continue;
      }
      long lines = 0, longest = 0;
      count_lines(dir / "prog_step.h", lines, longest);
      std::vector<fs::path> sources;
      for (int k = 1; k <= a.cpp_files; ++k) {
        const fs::path src = dir / (k == 1 ? "prog.cpp" : "prog_part" + std::to_string(k) + ".cpp");
        if (count_lines(src, lines, longest)) sources.push_back(src);
      }
      std::string failed;
      double total = 0, slowest = 0;
      long rss = 0;
      for (const fs::path& src : sources) {
        std::vector<std::string> cc = {a.cxx};
        for (const std::string& f : split(a.flags, ' ')) cc.push_back(f);
        for (const std::string& inc : a.includes) cc.push_back("-I" + inc);
        cc.insert(cc.end(), {"-I" + dir.string(), "-c", src.string(), "-o", (dir / "prog.o").string()});
        const Run comp = run(cc, (dir / "compile.log").string(), a.timeout_s);
        if (comp.status == -1)
          failed = "> " + std::to_string(static_cast<int>(a.timeout_s));
        else if (comp.status != 0)
          failed = "failed " + std::to_string(comp.status);
        if (!failed.empty()) break;
        total += comp.seconds;
        slowest = std::max(slowest, comp.seconds);
        rss = std::max(rss, comp.max_rss_kib);
      }
      char compile[32], slow[32];
      std::snprintf(compile, sizeof compile, "%.1f", total);
      std::snprintf(slow, sizeof slow, "%.1f", slowest);
      std::printf("%-16s %6d %12.2f %9ld %11ld %6zu %10s %10s %13.0f\n", mesh.c_str(), layers, gen.seconds, lines, longest,
                  sources.size(), failed.empty() ? compile : failed.c_str(), failed.empty() ? slow : "-", rss / 1024.0);
      std::fflush(stdout);
      fs::remove_all(dir);
    }
  }
  return 0;
}
