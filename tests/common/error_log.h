// The log behind docs/guide/troubleshooting.md (tests/docs/troubleshooting.py):
// with SHARC_ERROR_LOG set to a file, each error message a test asserts is
// appended to it as a line "Suite.Test<TAB>message", newlines written as \n.
// Parts of a message that change from run to run (a temporary folder) are
// replaced first by what the page shows instead, e.g. {tmp, "DIR"}.
// Header-only, and only GoogleTest besides the standard library, so suites
// of every kind (the DSL's, the checkpoint's, the generator's as a child
// process) log through it.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace sharc::testing {

// Returns `what` as it was (the replacements touch the logged copy only).
inline std::string log_error_message(const std::string& what,
                                     const std::vector<std::pair<std::string, std::string>>& replace = {}) {
  const char* log = std::getenv("SHARC_ERROR_LOG");
  if (!log) return what;
  std::string shown = what;
  for (const auto& [from, to] : replace)
    for (size_t at = 0; !from.empty() && (at = shown.find(from, at)) != std::string::npos; at += to.size())
      shown.replace(at, from.size(), to);
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string line = t ? std::string(t->test_suite_name()) + "." + t->name() : std::string("?");
  line += '\t';
  for (char c : shown) line += c == '\n' ? std::string("\\n") : std::string(1, c);
  std::ofstream(log, std::ios::app) << line << '\n';
  return what;
}

}  // namespace sharc::testing
