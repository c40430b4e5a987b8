// Hugging Face checkpoints in and out of a generated program, on any mesh
// (sharc::interop). import_hf reads a model folder (config.json and
// model.safetensors, or a sharded model.safetensors.index.json) into a
// running program's parameters; export_hf writes the program's parameters
// as a folder transformers loads as is.
//
// The correspondence is data: one table per architecture (interop.cpp)
// whose rows say which checkpoint tensor is which sharc parameter and how
// its layout differs. A layout is one of
//  - same: the element order is sharc's (GPT-2's Conv1D weights are stored
//    (in, out), as sharc's Linear kernels are);
//  - transposed: nn.Linear's (out, in) against sharc's (in, out);
//  - qkv by head: GPT-2's c_attn columns are q | k | v, sharc's fused QKV
//    kernel orders them (head, {q, k, v}, head_dim) (dsl/transformer.h says
//    why), so sharc's column j is the checkpoint's column
//    part * embed + head * head_dim + d.
// A row's "{i}" is the layer; a scanned program's parameter stacks the
// layers on a leading axis ("h/attn/qkv/kernel" for "h0/...", "h1/...").
//
// Importing reads only what this process's devices hold: for each distinct
// block of each parameter, the checkpoint bytes that map into it, as runs
// of contiguous bytes (pread), each byte once; the result counts them, so
// under MPI each process is seen to read its blocks and nothing else.
// Everything is checked before anything is read (the folder's config
// against the one the program was generated for, every tensor's presence,
// dtype and shape, and no tensor left over), and everything is read into
// staging before any parameter changes; with several processes they agree
// first, so a failed import on any process leaves every program as it was.
// Optimizer state ("opt/...") is not touched: a checkpoint of weights has
// none, and the program's is whatever it was (fresh after init()).
//
// Errors are InteropError (hf_config.h) naming the file and the tensor:
// a missing tensor, a shape that does not match, an unknown architecture, a
// config the program was not generated for (both values named), heads that
// the mesh's tensor-parallel axis does not divide, a truncated file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/checkpoint.h"
#include "runtime/hf_config.h"

namespace sharc::interop {

struct ImportResult {
  HfConfig config;                  // the folder's config.json
  std::vector<std::string> files;   // the tensor files read from
  uint64_t bytes_read = 0;          // tensor bytes this process read
  int64_t tensors = 0;              // checkpoint tensors mapped onto parameters
};

// Reads the model folder `folder` into `target`'s parameters, checking its
// config.json against `generated_for`: the config the program was
// generated from (GPTConfig::from_hf of the same file, or the one a
// program's HF_CONFIG named). With several processes, collective.
ImportResult import_hf(const rt::CheckpointTarget& target, const std::filesystem::path& folder,
                       const HfConfig& generated_for);

// Writes `target`'s parameters as a model folder of architecture
// `config.architecture`: config.json (hf_config_json(config)) and one
// model.safetensors (F32, metadata {"format": "pt"}), named and laid out as
// transformers saves that model. The folder is written beside its place
// and renamed into it, so a failure leaves nothing half written (an
// existing folder is replaced only once the new one is complete). With
// several processes, collective; process 0 writes.
void export_hf(const rt::CheckpointTarget& target, const std::filesystem::path& folder, const HfConfig& config);

// The same for a generated program.
template <class Program>
  requires requires { Program::mesh_shape(); }
ImportResult import_hf(Program& program, const std::filesystem::path& folder, const HfConfig& generated_for) {
  return import_hf(rt::checkpoint_target(program), folder, generated_for);
}
template <class Program>
  requires requires { Program::mesh_shape(); }
void export_hf(Program& program, const std::filesystem::path& folder, const HfConfig& config) {
  export_hf(rt::checkpoint_target(program), folder, config);
}

// What a model folder holds, against its own config.json, without a
// program: each tensor of the architecture's table (per layer) with its
// dtype, shape and the sharc parameter it becomes, the tensors nothing
// takes, and every problem an import would find in the folder alone (a
// missing tensor, a shape the config does not give, an unknown tensor, a
// dtype sharc does not read). `sharc-hf inspect` prints it.
struct Inspection {
  HfConfig config;
  std::string text;                   // the table, one line per tensor
  std::vector<std::string> problems;  // empty: the folder imports into a program generated from its config
};
Inspection inspect_hf(const std::filesystem::path& folder);

// One row of an architecture's table: the checkpoint tensor `hf` (without
// the model's prefix, "transformer." or "model."; "{i}" the layer), the
// sharc parameter `sharc` ("{i}" the layer), the checkpoint tensor's shape
// in the config's sizes ("E,3E": V vocab, T context, E width, M the MLP's
// hidden width), and how the layout differs.
enum class Layout { kSame, kTransposed, kQkvByHead };
struct TensorRule {
  const char* hf;
  const char* sharc;
  const char* shape;
  Layout layout = Layout::kSame;
};
// `a`'s table (what `sharc-hf table` prints).
std::vector<TensorRule> tensor_rules(Architecture a);

}  // namespace sharc::interop
