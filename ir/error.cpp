// Rendering of user errors in clang's form; see error.h.
#include "ir/error.h"

#include <cctype>
#include <filesystem>
#include <fstream>

namespace sharc {

namespace {

// Line `line` (1-based) of the file at `path`, if it can be read.
bool read_line(const std::filesystem::path& path, int line, std::string& out) {
  std::ifstream f(path);
  if (!f) return false;
  std::string text;
  for (int i = 1; std::getline(f, text); ++i) {
    if (i == line) {
      if (!text.empty() && text.back() == '\r') text.pop_back();
      out = std::move(text);
      return true;
    }
  }
  return false;
}

bool is_identifier_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

}  // namespace

std::string render_diagnostic(const Error& e, const std::vector<std::string>& source_roots) {
  const SrcLoc& loc = e.loc();
  const std::string tail = ": error: " + e.message() + "\n";
  std::string text;
  bool found = false;
  if (loc.known() && !loc.file.empty()) {
    const std::filesystem::path file(loc.file);
    if (file.is_absolute() || source_roots.empty()) found = read_line(file, loc.line, text);
    for (size_t i = 0; !found && !file.is_absolute() && i < source_roots.size(); ++i)
      found = read_line(std::filesystem::path(source_roots[i]) / file, loc.line, text);
  }
  if (!found || loc.column <= 0 || static_cast<size_t>(loc.column) > text.size() + 1)
    return loc.str_with_column() + tail + (found ? " " + std::to_string(loc.line) + " | " + text + "\n" : "");

  // g++ records the column of a call's '(' where clang records the callee's
  // first character; point at the callee, as clang's own diagnostics do, in
  // the headline and with the caret.
  size_t col = static_cast<size_t>(loc.column) - 1;
  if (col < text.size() && text[col] == '(')
    while (col > 0 && is_identifier_char(text[col - 1])) --col;
  const std::string number = std::to_string(loc.line);
  std::string pad;
  for (size_t i = 0; i < col; ++i) pad += text[i] == '\t' ? '\t' : ' ';
  return loc.str() + ":" + std::to_string(col + 1) + tail + " " + number + " | " + text + "\n" +
         std::string(number.size() + 2, ' ') + "| " + pad + "^\n";
}

}  // namespace sharc
