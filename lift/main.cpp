// sharc-lift: lowers a model source's SHARC_ELEMENTWISE functions to sharc IR
// and writes the header that declares their Tensor forms (dsl/lift.h).
//
//   sharc-lift SOURCE --output HEADER [--ir FILE] [--source-root DIR]
//              [--depfile FILE] [-- COMPILER FLAGS...]
//
// sharc_add_program runs it with the target's include paths and definitions.
// The source is parsed as C++20 by Clang; function bodies other than the
// marked ones are skipped (not type-checked), so the model's own calls of the
// Tensor forms need no header yet. Errors come in Clang's form; on any error
// nothing is written and the exit status is 1.
#include <clang/AST/ASTConsumer.h>
#include <clang/AST/ASTContext.h>
#include <clang/Basic/FileManager.h>
#include <clang/Basic/SourceManager.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/FrontendAction.h>
#include <clang/Tooling/CompilationDatabase.h>
#include <clang/Tooling/Tooling.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/cli.h"
#include "lift/lower.h"

#ifndef SHARC_CLANG_RESOURCE_DIR
#define SHARC_CLANG_RESOURCE_DIR ""
#endif

namespace {

struct Options {
  std::string source, output, ir, source_root, depfile;
  std::vector<std::string> flags;
};

// The command line (codegen/cli.h). Returns -1 to go on with `o` filled, or
// the status main() returns (0 after --help, 2 after a mistake).
int parse(int argc, char** argv, Options& o) {
  CLI::App app{"Lowers a model source's SHARC_ELEMENTWISE functions to sharc IR and writes the header "
               "that declares their Tensor forms (run by sharc_add_program's LIFT).",
               "sharc-lift"};
  app.add_option("SOURCE", o.source, "the model source")->required();
  app.add_option("--output", o.output, "the header to write");
  app.add_option("--ir", o.ir, "also write the lowered IR, as text, here");
  app.add_option("--source-root", o.source_root, "locations in the header are relative to this folder");
  app.add_option("--depfile", o.depfile, "write a Makefile depfile of the files read");
  app.footer("After --, the compiler flags the source is parsed with (the target's include paths and definitions).");
  // What follows "--" is the compiler's, not ours.
  int ours = 0;
  while (ours < argc && std::string(argv[ours]) != "--") ++ours;
  for (int i = ours + 1; i < argc; ++i) o.flags.push_back(argv[i]);
  if (const int code = sharc::cli::parse(app, ours, argv); code >= 0) return code;
  if (o.output.empty() && o.ir.empty()) return sharc::cli::fail(app, "nothing to write: give --output or --ir");
  return -1;
}

// Writes through a temporary and a rename, so a failed run leaves the old
// file (or none), never half of one.
bool write_atomically(const std::string& path, const std::string& text) {
  {
    // Unchanged: left alone, so what includes it is not rebuilt.
    std::ifstream old(path, std::ios::binary);
    std::ostringstream was;
    was << old.rdbuf();
    if (old && was.str() == text) return true;
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    if (!f.good()) {
      std::cerr << "sharc-lift: cannot write " << tmp << "\n";
      return false;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::cerr << "sharc-lift: cannot write " << path << ": " << ec.message() << "\n";
    return false;
  }
  return true;
}

// A fresh folder under the system's temporary directory, removed with it.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    namespace fs = std::filesystem;
    for (int i = 0;; ++i) {
      path = fs::temp_directory_path() /
             ("sharc-lift-" + std::to_string(::getpid()) + "-" + std::to_string(i));
      if (fs::create_directory(path)) break;
    }
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// What one run reads and makes: the options in, the lifted functions and the
// files the source included out.
struct Run {
  sharc::lift::LowerOptions options;
  std::vector<sharc::lift::LiftedFunction> lifted;
  std::set<std::string> files;
};

// Skips every function body but the marked ones, then lowers them.
class Consumer : public clang::ASTConsumer {
 public:
  explicit Consumer(Run& run) : run_(run) {}
  bool shouldSkipFunctionBody(clang::Decl* d) override {
    const auto* f = llvm::dyn_cast<clang::FunctionDecl>(d);
    return !(f && sharc::lift::is_lifted(*f));
  }
  void HandleTranslationUnit(clang::ASTContext& ctx) override {
    if (ctx.getDiagnostics().hasErrorOccurred()) return;
    run_.lifted = sharc::lift::lower_translation_unit(ctx, run_.options);
    const clang::SourceManager& sm = ctx.getSourceManager();
    for (auto it = sm.fileinfo_begin(); it != sm.fileinfo_end(); ++it)
      if (!sm.isInSystemHeader(sm.getLocForStartOfFile(sm.translateFile(it->first))))
        run_.files.insert(it->first->getName().str());
  }

 private:
  Run& run_;
};

class Action : public clang::ASTFrontendAction {
 public:
  explicit Action(Run& run) : run_(run) {}
  std::unique_ptr<clang::ASTConsumer> CreateASTConsumer(clang::CompilerInstance& ci,
                                                        llvm::StringRef) override {
    ci.getFrontendOpts().SkipFunctionBodies = true;
    return std::make_unique<Consumer>(run_);
  }

 private:
  Run& run_;
};

class Factory : public clang::tooling::FrontendActionFactory {
 public:
  explicit Factory(Run& run) : run_(run) {}
  std::unique_ptr<clang::FrontendAction> create() override {
    return std::make_unique<Action>(run_);
  }

 private:
  Run& run_;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const int code = parse(argc, argv, o); code >= 0) return code;
  namespace fs = std::filesystem;
  if (!fs::is_regular_file(o.source)) {
    std::cerr << "sharc-lift: " << o.source << ": no such file\n";
    return 1;
  }
  const std::string source = fs::absolute(o.source).lexically_normal().string();
  std::vector<std::string> flags = {"-xc++", "-std=c++20", "-w"};
  if (std::string(SHARC_CLANG_RESOURCE_DIR).size())
    flags.push_back(std::string("-resource-dir=") + SHARC_CLANG_RESOURCE_DIR);
  // The header this run writes is included by the source: while the source
  // is read, an empty one stands in for it (the source's own calls of the
  // Tensor forms are in skipped bodies), from a folder searched first.
  TempDir stand_in;
  if (!o.output.empty()) {
    std::ofstream(stand_in.path / fs::path(o.output).filename())
        << "// sharc-lift: being generated\n";
    flags.push_back("-I" + stand_in.path.string());
  }
  flags.insert(flags.end(), o.flags.begin(), o.flags.end());
  clang::tooling::FixedCompilationDatabase db(".", flags);
  clang::tooling::ClangTool tool(db, {source});

  Run run;
  const std::string& root = run.options.source_root =
      o.source_root.empty() ? std::string()
                            : fs::absolute(o.source_root).lexically_normal().string();
  Factory factory(run);
  if (tool.run(&factory) != 0) return 1;  // Clang printed the errors

  std::string shown = source;
  if (!root.empty() && shown.rfind(root, 0) == 0) shown = fs::relative(source, root).string();
  if (!o.output.empty() &&
      !write_atomically(o.output, sharc::lift::write_header(run.lifted, shown)))
    return 1;
  if (!o.ir.empty() && !write_atomically(o.ir, sharc::lift::lifted_ir_text(run.lifted))) return 1;
  if (!o.depfile.empty()) {
    // The files read, but not the stand-in (gone when this run ends).
    std::string d = (o.output.empty() ? o.ir : o.output) + ":";
    for (const std::string& f : run.files)
      if (f.rfind(stand_in.path.string(), 0) != 0) d += " " + f;
    if (!write_atomically(o.depfile, d + "\n")) return 1;
  }
  return 0;
}
