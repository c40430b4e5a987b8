// The file behind docs/guide/troubleshooting.md (tests/docs/troubleshooting.py):
// with SHARC_ERROR_LOG set, append_error_log adds the line
// "Suite.Test<TAB>message" to that file, newlines written as \n, after
// replacing the parts of the message that change from run to run (a
// temporary folder) by what the page shows instead, e.g. {tmp, "DIR"}.
// No GoogleTest here, so a test that is a plain program run by mpiexec logs
// through it too; GoogleTest suites use error_log.h, which names the test.
#pragma once

#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace sharc::testing {

inline void append_error_log(const std::string& test, const std::string& what,
                             const std::vector<std::pair<std::string, std::string>>& replace = {}) {
  const char* log = std::getenv("SHARC_ERROR_LOG");
  if (!log) return;
  std::string shown = what;
  for (const auto& [from, to] : replace)
    for (size_t at = 0; !from.empty() && (at = shown.find(from, at)) != std::string::npos; at += to.size())
      shown.replace(at, from.size(), to);
  std::string line = test + '\t';
  for (char c : shown) line += c == '\n' ? std::string("\\n") : std::string(1, c);
  std::ofstream(log, std::ios::app) << line + '\n' << std::flush;  // one write: processes append at once
}

}  // namespace sharc::testing
