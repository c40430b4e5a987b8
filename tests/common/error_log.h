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

// `expr` throws `Type` whose message contains `text`; the message is logged
// (log_error_message) with `replace`, a vector of (from, to) pairs, applied
// to the logged copy (a test's folders shown as DIR/).
#define SHARC_EXPECT_ERROR_CONTAINS(expr, Type, text, replace)                 \
  do {                                                                        \
    std::string what_;                                                        \
    try {                                                                     \
      expr;                                                                   \
      ADD_FAILURE() << #expr " did not throw";                                \
    } catch (const Type& e) {                                                 \
      what_ = e.what();                                                       \
      ::sharc::testing::log_error_message(what_, replace);                    \
    }                                                                         \
    EXPECT_NE(what_.find(text), std::string::npos) << "the message: " << what_; \
  } while (0)
