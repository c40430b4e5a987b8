// The generator's behaviour on failure, run as a child process the way the
// build runs it: a mistake in the model exits non-zero, prints the model's
// file:line and the message, and leaves no generated files behind (not even
// those of an earlier successful run), so the build cannot compile stale code.
// The generator under test is built from bad_model.cpp.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/common/error_log.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int exit_code = -1;
  std::string err;
};

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

class GeneratorErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "sharc_generator_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    out_ = dir_ / "out";
  }
  void TearDown() override { fs::remove_all(dir_); }

  Result generate(const std::string& program, const std::string& mesh = "data=2,model=4",
                  const std::string& extra = "") {
    const fs::path err = dir_ / "stderr.txt";
    const std::string cmd = std::string("'") + SHARC_BAD_GENERATOR + "' --program " + program +
                            " --mesh " + mesh + " --out-dir '" + out_.string() + "' --templates '" +
                            SHARC_TEMPLATES_DIR + "' --name " + program + " --source-root '" +
                            SHARC_SOURCE_ROOT + "' " + extra + " 2> '" + err.string() + "'";
    const int status = std::system(cmd.c_str());
    Result r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.err = read_file(err);
    // What a failed run printed, for docs/guide/troubleshooting.md (its
    // temporary folders shown as OUT and DIR).
    if (r.exit_code != 0)
      sharc::testing::log_error_message(r.err, {{out_.string(), "OUT"}, {dir_.string(), "DIR"}});
    return r;
  }

  // Generated-looking files left in the output folder.
  std::vector<std::string> leftovers() const {
    std::vector<std::string> files;
    if (!fs::exists(out_)) return files;
    for (auto& e : fs::directory_iterator(out_)) {
      const std::string ext = e.path().extension().string();
      if (ext == ".h" || ext == ".cpp" || ext == ".tmp")
        files.push_back(e.path().filename().string());
    }
    return files;
  }

  // The line of bad_model.cpp marked ERROR-HERE.
  static int marked_line(std::string* text = nullptr) {
    std::ifstream f(SHARC_BAD_MODEL_SOURCE);
    std::string line;
    for (int n = 1; std::getline(f, line); ++n) {
      if (line.find("// ERROR-HERE") != std::string::npos) {
        if (text) *text = line;
        return n;
      }
    }
    return -1;
  }

  fs::path dir_, out_;
};

TEST_F(GeneratorErrors, BadModelReportsFileLineAndLeavesNoOutput) {
  // A previous successful run's files must disappear too.
  fs::create_directories(out_);
  std::ofstream(out_ / "bad_model.h") << "// stale\n";
  std::ofstream(out_ / "bad_model_step.h") << "// stale\n";
  std::ofstream(out_ / "bad_model.cpp") << "// stale\n";
  std::ofstream(out_ / "bad_model_part2.cpp") << "// stale\n";

  const Result r = generate("bad_model", "data=2,model=4", "--cpp-files 2");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  std::string text;
  const int line = marked_line(&text);
  ASSERT_GT(line, 0);
  // clang's form: file:line:col, the message, then the line and a caret under
  // the call (s.param) that declared the bad spec.
  const size_t col = text.find("param(");
  ASSERT_NE(col, std::string::npos);
  const std::string num = std::to_string(line);
  const std::string want = "tests/emit/bad_model.cpp:" + num + ":" + std::to_string(col + 1) +
                           ": error: unknown mesh axis 'modle'";
  EXPECT_EQ(r.err.rfind(want, 0), 0u) << "stderr:\n" << r.err << "\nexpected to start with:\n"
                                      << want;
  const std::string display =
      "\n " + num + " | " + text + "\n" + std::string(num.size() + 2, ' ') + "| " +
      std::string(col, ' ') + "^\n";
  EXPECT_NE(r.err.find(display), std::string::npos) << "stderr:\n" << r.err << "\nexpected:\n"
                                                    << display;
  EXPECT_EQ(r.err.find("internal compiler error"), std::string::npos) << r.err;
  EXPECT_TRUE(leftovers().empty()) << "left behind: " << ::testing::PrintToString(leftovers());
}

TEST_F(GeneratorErrors, UnknownProgramListsTheRegisteredOnes) {
  const Result r = generate("no_such_program");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  // No DSL line to name: the message names the target and what it asked for.
  EXPECT_EQ(r.err.rfind("sharc: no_such_program (program no_such_program on mesh data=2,model=4): "
                        "error: no program named 'no_such_program'",
                        0),
            0u)
      << r.err;
  EXPECT_NE(r.err.find("bad_model, good_model"), std::string::npos) << r.err;
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(GeneratorErrors, MeshThatDoesNotFitTheDeviceCount) {
  const Result r = generate("good_model", "data=2,model=4 --devices 6");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("has 8 devices but 6 devices were given"), std::string::npos) << r.err;
  EXPECT_TRUE(leftovers().empty());
}

// A generation-time option the program does not read stops the build (a
// misspelt one would otherwise build the default silently), at the
// program's SHARC_PROGRAM line, with a note at the sharc_add_program call
// that gave it (--called-from, which sharc_add_program passes).
TEST_F(GeneratorErrors, AnOptionTheProgramDoesNotRead) {
  const Result r = generate("good_model", "data=2,model=4 --option layers=12",
                            "--called-from examples/own_project/CMakeLists.txt:21");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  std::ifstream f(SHARC_BAD_MODEL_SOURCE);
  std::string text;
  int line = 1;
  while (std::getline(f, text) && text.rfind("SHARC_PROGRAM(good_model", 0) != 0) ++line;
  const std::string at = "tests/emit/bad_model.cpp:" + std::to_string(line) + ":";
  EXPECT_EQ(r.err.rfind(at, 0), 0u) << r.err;
  EXPECT_NE(r.err.find(": error: option 'layers' is given, but program \"good_model\" does not read it (it reads "
                       "no options)\n"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("\n " + std::to_string(line) + " | SHARC_PROGRAM(good_model, b) {\n"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("\nexamples/own_project/CMakeLists.txt:21: note: sharc_add_program(good_model) asked for "
                       "program good_model on mesh data=2,model=4 with OPTIONS layers=12\n"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(GeneratorErrors, GoodModelWritesExactlyItsHeadersAndSource) {
  const Result r = generate("good_model");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  std::vector<std::string> files = leftovers();
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"good_model.cpp", "good_model.h", "good_model_step.h"}));
  EXPECT_NE(
      read_file(out_ / "good_model.h").find("// GENERATED by sharc from tests/emit/bad_model.cpp"),
      std::string::npos);
}

// --cpp-files N writes N sources, those a small program does not need empty
// (nothing to compile: no include, no code).
TEST_F(GeneratorErrors, CppFilesWritesThatManySources) {
  const Result r = generate("good_model", "data=2,model=4", "--cpp-files 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> files = leftovers();
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"good_model.cpp", "good_model.h", "good_model_part2.cpp",
                                             "good_model_part3.cpp", "good_model_step.h"}));
  const std::string part = read_file(out_ / "good_model_part3.cpp");
  EXPECT_NE(part.find("// Part 3 of 3 of program good_model's step: empty."), std::string::npos) << part;
  EXPECT_EQ(part.find("#include"), std::string::npos) << part;
  EXPECT_NE(read_file(out_ / "good_model.cpp").find("all of them are below, after forward_device()."),
            std::string::npos);
}

TEST_F(GeneratorErrors, CppFilesMustBeAPositiveCount) {
  const Result r = generate("good_model", "data=2,model=4", "--cpp-files 0");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--cpp-files: '0' is not between 1 and 1000\nRun with --help"), std::string::npos) << r.err;
  EXPECT_TRUE(leftovers().empty()) << "left behind: " << ::testing::PrintToString(leftovers());
}

// The command line's mistakes in the form every tool reports them
// (codegen/cli.h): an unknown flag, and two runs asked for at once.
TEST_F(GeneratorErrors, AnUnknownFlagOrTwoRunsAreUsageErrors) {
  Result r = generate("good_model", "data=2,model=4", "--cpp-file 2");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("error: The following arguments were not expected: 2 --cpp-file\nRun with --help"),
            std::string::npos)
      << r.err;
  r = generate("good_model", "data=2,model=4", "--report --explain");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("error: --report excludes --explain"), std::string::npos) << r.err;
  EXPECT_TRUE(leftovers().empty()) << "left behind: " << ::testing::PrintToString(leftovers());
}

}  // namespace
