// User-facing diagnostics. Every DSL call records a std::source_location; a
// mistake in the user's model is reported as `file:line: error: message` and
// thrown as sharc::Error so the generator can print it, exit non-zero and leave
// no partial output. Compiler bugs use internal_error(), which says so.
#pragma once

#include <source_location>
#include <stdexcept>
#include <string>

namespace sharc {

// A source position in the user's model, copyable and printable. File paths are
// relative to the project root (the build passes -ffile-prefix-map).
struct SrcLoc {
  std::string file;
  int line = 0;

  SrcLoc() = default;
  SrcLoc(std::string f, int l) : file(std::move(f)), line(l) {}
  SrcLoc(const std::source_location& l)  // NOLINT: implicit by design
      : file(l.file_name()), line(static_cast<int>(l.line())) {}

  bool known() const { return line > 0; }
  std::string str() const { return known() ? file + ":" + std::to_string(line) : "<unknown>"; }
};

using Here = std::source_location;

// An error in the user's model or build configuration.
class Error : public std::runtime_error {
 public:
  Error(SrcLoc loc, const std::string& message)
      : std::runtime_error(loc.str() + ": error: " + message), loc_(std::move(loc)) {}
  const SrcLoc& loc() const { return loc_; }

 private:
  SrcLoc loc_;
};

[[noreturn]] inline void user_error(const SrcLoc& loc, const std::string& message) {
  throw Error(loc, message);
}

// A broken invariant inside sharc itself: not the user's fault.
[[noreturn]] inline void internal_error(const std::string& message,
                                        const std::source_location& where = Here::current()) {
  throw std::logic_error(std::string("internal compiler error (sharc bug) at ") +
                         where.file_name() + ":" + std::to_string(where.line()) + ": " + message);
}

#define SHARC_CHECK(cond, msg)                                         \
  do {                                                                 \
    if (!(cond)) ::sharc::internal_error(std::string(#cond ": ") + (msg)); \
  } while (0)

}  // namespace sharc
