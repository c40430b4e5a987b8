// Build-time tool for emit_bucketed_all_reduce_test: emits the hand-built
// bucketed program (bucketed_graph.h) as C++ exactly as the generator would,
// into OUT/bucketed_all_reduce.{h,cpp} (namespace
// sharc_gen::bucketed_all_reduce). A test tool, not the product's generator:
// the program is an IR graph built in C++, not a traced model.
//
// usage: bucketed_emit --out-dir DIR --templates DIR
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "codegen/emit_cpu.h"
#include "tests/emit/bucketed_graph.h"

int main(int argc, char** argv) {
  std::string out_dir, templates;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--out-dir")
      out_dir = argv[i + 1];
    else if (flag == "--templates")
      templates = argv[i + 1];
  }
  if (out_dir.empty() || templates.empty()) {
    std::cerr << "usage: bucketed_emit --out-dir DIR --templates DIR\n";
    return 2;
  }
  try {
    sharc::EmitOptions o;
    o.program = "bucketed_all_reduce";
    o.cpp_namespace = "sharc_gen::bucketed_all_reduce";
    o.header_name = "bucketed_all_reduce.h";
    o.model_file = "tests/emit/bucketed_graph.cpp";
    o.templates = sharc::load_templates(templates);
    const sharc::EmittedFiles f =
        sharc::emit_cpu(sharc::test::bucketed_all_reduce_graph(/*bucketed=*/true), o);
    std::filesystem::create_directories(out_dir);
    std::ofstream(std::filesystem::path(out_dir) / "bucketed_all_reduce.h") << f.header;
    std::ofstream(std::filesystem::path(out_dir) / "bucketed_all_reduce_step.h") << f.step_header;
    std::ofstream(std::filesystem::path(out_dir) / "bucketed_all_reduce.cpp") << f.source;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
