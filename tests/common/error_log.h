// Logs an error message a GoogleTest test asserts for
// docs/guide/troubleshooting.md, under the running test's name
// (error_log_file.h has the format and the file).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "tests/common/error_log_file.h"

namespace sharc::testing {

// Returns `what` as it was (the replacements touch the logged copy only).
inline std::string log_error_message(const std::string& what,
                                     const std::vector<std::pair<std::string, std::string>>& replace = {}) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  append_error_log(t ? std::string(t->test_suite_name()) + "." + t->name() : std::string("?"), what, replace);
  return what;
}

}  // namespace sharc::testing
