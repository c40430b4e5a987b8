// The tables a generated program publishes about its parameters, inputs and
// outputs, so a driver can iterate them, look them up by name and size its
// buffers without hard-coding shapes:
//
//   for (const sharc::rt::TensorInfo& p : gen::kParameters) {
//     std::vector<float> value(p.elements());
//     program.get_parameter(p.name, value);   // size-checked against p
//     std::printf("%s %s %s\n", p.name.data(), p.type_str().c_str(), p.spec_str().c_str());
//   }
//   const sharc::rt::TensorInfo& w = gen::parameter("dot1/kernel");  // or throws
//
// One row per tensor: its name (a parameter's '/'-joined path, or the name
// given to b.input / b.output), dtype, global shape, layout, the block each
// device holds, and the DSL line that declared it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sharc::rt {

// A layout: per dimension, the mesh axes it is split over (major first); an
// empty list is a replicated dimension. The form rt::visualize_sharding takes.
using Spec = std::vector<std::vector<std::string>>;

struct TensorInfo {
  std::string_view name;              // "dot1/kernel", "x"
  std::string_view dtype;             // "f32"
  std::vector<int64_t> shape;         // global shape
  Spec spec;                          // layout over the mesh
  std::vector<int64_t> local_shape;   // the block each device holds
  std::string_view declared_at;       // "samples/dot_relu_dot/model.h:16"

  int64_t elements() const;           // of the global tensor
  int64_t local_elements() const;     // of one device's block
  size_t bytes() const;               // of the global tensor
  size_t local_bytes() const;         // of one device's block
  std::string type_str() const;       // "f32[1024,1024]"
  std::string local_type_str() const; // "f32[1024,256]"
  std::string spec_str() const;       // "P(None, 'model')"; "P(('data', 'model'),)" for two axes
};

// The row named `name` in `table`, or nullptr.
const TensorInfo* find_tensor(std::span<const TensorInfo> table, std::string_view name) noexcept;

// The row named `name`; throws std::out_of_range that lists the names there
// are, e.g. `no parameter "w3" in program dot_relu_dot; its parameters are
// "dot1/kernel", "w2"`. `kind` is "parameter", "input" or "output".
const TensorInfo& lookup_tensor(std::span<const TensorInfo> table, std::string_view name,
                                std::string_view kind, std::string_view program);

// Throws std::invalid_argument unless `size` (the number of elements a caller
// passed) is the tensor's global element count: `set_parameter("dot1/kernel"):
// got 1000 floats, but the parameter f32[1024,1024] has 1048576`.
void check_elements(const TensorInfo& t, size_t size, std::string_view call,
                    std::string_view kind);

}  // namespace sharc::rt
