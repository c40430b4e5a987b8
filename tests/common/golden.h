// Golden-file comparison shared by the suites that keep generated text under
// tests/golden/: a mismatch fails with a unified diff; with
// SHARC_UPDATE_GOLDENS=1 (scripts/regen_goldens.sh) the golden is written
// instead, to be reviewed like code. Header-only.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace sharc::testing {

namespace fs = std::filesystem;

inline std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

// A generated program's code as one text: STEM_step.h, STEM.cpp and its part
// files STEM_part2.cpp ... (those that exist), in that order. Empty when
// STEM.cpp is missing.
inline std::string read_generated(const fs::path& dir, const std::string& stem) {
  if (!fs::exists(dir / (stem + ".cpp"))) return "";
  std::string text = read_file(dir / (stem + "_step.h")) + read_file(dir / (stem + ".cpp"));
  for (int k = 2; fs::exists(dir / (stem + "_part" + std::to_string(k) + ".cpp")); ++k)
    text += read_file(dir / (stem + "_part" + std::to_string(k) + ".cpp"));
  return text;
}

inline bool updating() {
  const char* e = std::getenv("SHARC_UPDATE_GOLDENS");
  return e != nullptr && *e != '\0' && std::string(e) != "0";
}

inline std::string unified_diff(const fs::path& golden, const std::string& actual) {
  const fs::path tmp = fs::temp_directory_path() /
                       ("sharc_golden_" + golden.filename().string() + "." +
                        std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::ofstream(tmp, std::ios::binary) << actual;
  const std::string cmd = "diff -u --label '" + golden.string() + "' --label generated '" +
                          golden.string() + "' '" + tmp.string() + "' 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
  }
  fs::remove(tmp);
  return out;
}

inline void check_golden(const fs::path& golden, const std::string& actual) {
  if (updating()) {
    fs::create_directories(golden.parent_path());
    std::ofstream(golden, std::ios::binary) << actual;
    std::printf("updated %s\n", golden.string().c_str());
    return;
  }
  ASSERT_TRUE(fs::exists(golden)) << golden << " is missing; run scripts/regen_goldens.sh";
  const std::string want = read_file(golden);
  if (want == actual) return;
  ADD_FAILURE() << golden.filename() << " differs from the golden (--- golden, +++ generated):\n"
                << unified_diff(golden, actual)
                << "If the change is intended, run scripts/regen_goldens.sh and review the diff.";
}

}  // namespace sharc::testing
