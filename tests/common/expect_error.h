// Test helpers for user errors: run DSL code that must throw sharc::Error at a
// given file:line, and trace a program inline in a test body (so the
// `line = __LINE__ + 1` idiom names the exact DSL call). Header-only; shared
// by the suites that assert error messages.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <regex>
#include <string>

#include "dsl/sharc.h"
#include "tests/common/error_log.h"

namespace sharc::testing {

// Every user error an error suite asserts goes through here: a message speaks
// the user's language, so it names no IR node number (`%3`), and it names the
// file:line of the user's code that caused it. Returns e.what().
//
// Each message is also logged for docs/guide/troubleshooting.md
// (error_log.h).
inline std::string user_message(const Error& e) {
  const std::string what = e.what();
  log_error_message(what);
  EXPECT_FALSE(std::regex_search(what, std::regex("%[0-9]")))
      << "a user error names an IR node number: " << what;
  EXPECT_TRUE(e.loc().known()) << "a user error names no file:line: " << what;
  EXPECT_TRUE(std::regex_search(what, std::regex("^[^ :]+:[0-9]+: error: ")))
      << "a user error does not start with file:line: " << what;
  return what;
}

// Runs f, which must throw sharc::Error; returns the error's what() after
// checking that it starts with `file`:`line` and that loc() agrees.
inline std::string error_at(const char* file, int line, const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    const std::string where = std::string(file) + ":" + std::to_string(line) + ": error: ";
    const std::string what = user_message(e);
    EXPECT_EQ(what.substr(0, where.size()), where) << "full message: " << what;
    EXPECT_EQ(e.loc().file, file);
    EXPECT_EQ(e.loc().line, line);
    return what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected sharc::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected sharc::Error, nothing was thrown";
  return "";
}

// A program being traced in the test body.
struct Traced {
  explicit Traced(const std::string& name = "bad_program") : tracer(name), b(tracer) {}
  Tracer tracer;
  ProgramBuilder b;
  ir::Graph graph() { return tracer.graph(); }
};

}  // namespace sharc::testing
