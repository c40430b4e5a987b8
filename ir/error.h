// User-facing diagnostics. Every DSL call records a std::source_location; a
// mistake in the user's model is reported as `file:line: error: message` and
// thrown as sharc::Error so the generator can print it, exit non-zero and leave
// no partial output. The generator prints it the way clang does
// (render_diagnostic: `file:line:col: error: ...`, then the source line and a
// caret under the column). Messages speak the user's language: an operation is
// named by its kind, its module path and its DSL line, never by an IR node
// number. Compiler bugs use internal_error(), which says so.
#pragma once

#include <version>
#if defined(__cpp_lib_source_location)
#include <source_location>
#endif
#include <stdexcept>
#include <string>
#include <vector>

namespace sharc {

// The call site of a DSL call: `SrcLoc loc = Here::current()` as a default
// argument records where the user called it. std::source_location where the
// standard library has it (g++ 11+); clang 14 on libstdc++ lacks the builtin
// that std::source_location needs, so there the same interface is built on
// clang's __builtin_FILE/LINE/COLUMN, which also give the caller's position
// when used as default arguments.
#if defined(__cpp_lib_source_location)
using Here = std::source_location;
#else
class Here {
 public:
  // The caller's position (as a default argument: the call site's).
  static constexpr Here current(const char* file = __builtin_FILE(), int line = __builtin_LINE(),
                                int column = __builtin_COLUMN()) noexcept {
    Here h;
    h.file_ = file;
    h.line_ = line;
    h.column_ = column;
    return h;
  }
  // The position's file, line and column, as std::source_location's.
  //@{
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr unsigned line() const noexcept { return static_cast<unsigned>(line_); }
  constexpr unsigned column() const noexcept { return static_cast<unsigned>(column_); }
  //@}

 private:
  const char* file_ = "";
  int line_ = 0;
  int column_ = 0;
};
#endif

// A source position in the user's model, copyable and printable. File paths are
// relative to the project root (the build passes -ffile-prefix-map).
struct SrcLoc {
  std::string file;  // relative to the project root
  int line = 0;      // 1-based; 0 when unknown
  int column = 0;  // 1-based; 0 when unknown

  SrcLoc() = default;
  // A position by file, line and column; or the one Here::current() took
  // (implicit, so that `SrcLoc loc = Here::current()` defaults work).
  //@{
  SrcLoc(std::string f, int l, int c = 0) : file(std::move(f)), line(l), column(c) {}
  SrcLoc(const Here& l)  // NOLINT: implicit by design
      : file(l.file_name()), line(static_cast<int>(l.line())), column(static_cast<int>(l.column())) {}
  //@}

  // Whether the position is known (line > 0).
  bool known() const { return line > 0; }
  // file:line, the form messages, logs and generated comments use.
  std::string str() const { return known() ? file + ":" + std::to_string(line) : "<unknown>"; }
  // file:line:col when the column is known (clang's diagnostic form).
  std::string str_with_column() const {
    return column > 0 && known() ? str() + ":" + std::to_string(column) : str();
  }
};

// An error in the user's model or build configuration.
class Error : public std::runtime_error {
 public:
  // what() is "file:line: error: message".
  Error(SrcLoc loc, const std::string& message)
      : std::runtime_error(loc.str() + ": error: " + message),
        loc_(std::move(loc)),
        message_(message) {}
  // Where the mistake is: the user's line that made it.
  const SrcLoc& loc() const { return loc_; }
  // The message without the `file:line: error: ` prefix.
  const std::string& message() const { return message_; }

 private:
  SrcLoc loc_;
  std::string message_;
};

// `file:line:col: error: message`, then, when the file can be read (as given,
// or under one of `source_roots`, since recorded paths are relative to the
// project root), the source line and a caret under the column:
//
//   model.cpp:21:17: error: matmul contraction mismatch: ...
//      21 |   Tensor y = matmul(x, w);
//         |                    ^
std::string render_diagnostic(const Error& e, const std::vector<std::string>& source_roots = {});

// Throws Error(loc, message): a mistake in the user's model at `loc`.
[[noreturn]] inline void user_error(const SrcLoc& loc, const std::string& message) {
  throw Error(loc, message);
}

// A broken invariant inside sharc itself: not the user's fault.
[[noreturn]] inline void internal_error(const std::string& message,
                                        const Here& where = Here::current()) {
  throw std::logic_error(std::string("internal compiler error (sharc bug) at ") +
                         where.file_name() + ":" + std::to_string(where.line()) + ": " + message);
}

#define SHARC_CHECK(cond, msg)                                         \
  do {                                                                 \
    if (!(cond)) ::sharc::internal_error(std::string(#cond ": ") + (msg)); \
  } while (0)

}  // namespace sharc
