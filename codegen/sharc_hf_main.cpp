// sharc-hf: Hugging Face model folders as sharc sees them (runtime/interop.h).
//
//   sharc-hf inspect FOLDER     the folder's config in sharc's words, each
//                               tensor with the sharc parameter it becomes,
//                               and every problem an import would find
//                               (exit status 1 when there is one)
//   sharc-hf table [gpt2|llama] the architecture's table: checkpoint tensor,
//                               sharc parameter, shape, layout
//
// Importing into and exporting from a program are library calls
// (interop::import_hf, export_hf), since they need the generated program.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>
#include <string>

#include "codegen/cli.h"
#include "runtime/interop.h"

int main(int argc, char** argv) {
  using namespace sharc::interop;
  CLI::App app{"Hugging Face model folders as sharc sees them.", "sharc-hf"};
  app.require_subcommand(1);
  std::string folder, architecture = "gpt2";
  CLI::App* inspect = app.add_subcommand("inspect", "the folder's tensors and the sharc parameters they become");
  inspect->add_option("FOLDER", folder, "a model folder (config.json, model.safetensors)")->required();
  CLI::App* table = app.add_subcommand("table", "an architecture's table of tensors and parameters");
  table->add_option("ARCHITECTURE", architecture, "gpt2 (the default) or llama")
      ->check(CLI::IsMember({"gpt2", "llama"}));
  if (const int rc = sharc::cli::parse(app, argc, argv); rc >= 0) return rc;
  try {
    if (inspect->parsed()) {
      const Inspection r = inspect_hf(folder);
      std::fputs(r.text.c_str(), stdout);
      for (const std::string& p : r.problems) std::fprintf(stderr, "sharc-hf: %s\n", p.c_str());
      if (!r.problems.empty()) {
        std::fprintf(stderr, "sharc-hf: %zu problem%s: an import of this folder would fail\n", r.problems.size(),
                     r.problems.size() == 1 ? "" : "s");
        return 1;
      }
      std::printf("no problems: it imports into a program generated from its config.json (HF_CONFIG)\n");
      return 0;
    }
    const bool gpt2 = architecture == "gpt2";
    const std::vector<TensorRule> rules = tensor_rules(gpt2 ? Architecture::kGpt2 : Architecture::kLlama);
    int hf_width = 17, sharc_width = 15;  // the headings'
    for (const TensorRule& r : rules) {
      hf_width = std::max(hf_width, static_cast<int>(std::strlen(r.hf)));
      sharc_width = std::max(sharc_width, static_cast<int>(std::strlen(r.sharc)));
    }
    std::printf("%-*s  %-*s  %-5s  %s\n", hf_width, "checkpoint tensor", sharc_width, "sharc parameter", "shape",
                "layout");
    for (const TensorRule& r : rules)
      std::printf("%-*s  %-*s  %-5s  %s\n", hf_width, r.hf, sharc_width, r.sharc, r.shape,
                  r.layout == Layout::kSame ? "same" : r.layout == Layout::kTransposed ? "transposed" : "qkv by head");
    if (gpt2)
      std::printf("\n{i}: the layer. Shapes: V vocab_size, T n_positions, E n_embd, M n_inner (4 E when null).\n");
    else
      std::printf("\n{i}: the layer. Shapes: V vocab_size, E hidden_size, M intermediate_size, K num_key_value_heads "
                  "x head_dim.\n");
    return 0;
  } catch (const std::exception& e) {
    return sharc::cli::fail(app, e.what());
  }
}
