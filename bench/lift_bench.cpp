// bench_lift: how long sharc-lift takes per model file, the cost it adds to
// a build (the target is under 2 s per file). Runs the tool as the build
// does (sharc_lift in cmake/sharc.cmake: the source, --output, --ir, and the
// include path) on each file --runs times and prints the mean and the best
// wall time, and how many functions it lifted.
//
//   bench_lift [--runs N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codegen/cli.h"

namespace {

int count_functions(const std::filesystem::path& ir) {
  std::ifstream f(ir);
  std::string line;
  int n = 0;
  while (std::getline(f, line)) n += line.rfind("program @", 0) == 0;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  CLI::App app{"sharc-lift's run time on three model files.", "bench_lift"};
  app.add_option("--runs", runs, "runs per file")->check(sharc::cli::at_least(1))->capture_default_str();
  if (const int code = sharc::cli::parse(app, argc, argv); code >= 0) return code;
  namespace fs = std::filesystem;
  const fs::path root = SHARC_SOURCE_DIR;
  const fs::path out = fs::temp_directory_path() / "sharc_bench_lift";
  fs::create_directories(out);
  // The sample's model (one function), the lift suite's file (the nine of
  // functions.h, with GoogleTest's headers), and a model that lifts nothing.
  const std::vector<std::string> files = {"samples/custom_activation/model.cpp",
                                          "tests/lift/lift_test.cpp", "samples/gpt2/model.cpp"};
  std::printf("%-40s %6s %10s %10s %10s\n", "file", "runs", "mean s", "best s", "functions");
  for (const std::string& file : files) {
    const fs::path header = out / (fs::path(file).stem().string() + ".lifted.h");
    const fs::path ir = out / (fs::path(file).stem().string() + ".lifted.ir");
    const std::string cmd = std::string(SHARC_LIFT_TOOL) + " " + (root / file).string() +
                            " --output " + header.string() + " --ir " + ir.string() +
                            " --source-root " + root.string() + " -- -I" + root.string() +
                            " > /dev/null 2>&1";
    double total = 0, best = 1e30;
    for (int r = 0; r < runs; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const int status = std::system(cmd.c_str());
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (status != 0) {
        std::fprintf(stderr, "bench_lift: sharc-lift failed on %s: %s\n", file.c_str(),
                     cmd.c_str());
        return 1;
      }
      total += s;
      best = std::min(best, s);
    }
    std::printf("%-40s %6d %10.3f %10.3f %10d\n", file.c_str(), runs, total / runs, best,
                count_functions(ir));
  }
  fs::remove_all(out);
  return 0;
}
