// Test helpers for user errors: run DSL code that must throw sharc::Error at a
// given file:line, and trace a program inline in a test body (so the
// `line = __LINE__ + 1` idiom names the exact DSL call). Header-only; shared
// by the suites that assert error messages.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "dsl/sharc.h"

namespace sharc::testing {

// Runs f, which must throw sharc::Error; returns the error's what() after
// checking that it starts with `file`:`line` and that loc() agrees.
inline std::string error_at(const char* file, int line, const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    const std::string where = std::string(file) + ":" + std::to_string(line) + ": error: ";
    const std::string what = e.what();
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
