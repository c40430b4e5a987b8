// TensorInfo accessors and the checked lookups generated programs use; see
// program_info.h.
#include "runtime/program_info.h"

#include <stdexcept>

namespace sharc::rt {

namespace {

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string type_of(std::string_view dtype, const std::vector<int64_t>& shape) {
  std::string s(dtype);
  s += "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

size_t dtype_bytes(std::string_view dtype) {
  if (dtype == "f32" || dtype == "i32") return 4;
  if (dtype == "bf16" || dtype == "f16") return 2;
  throw std::logic_error("TensorInfo: unknown dtype '" + std::string(dtype) + "'");
}

}  // namespace

int64_t TensorInfo::elements() const { return product(shape); }
int64_t TensorInfo::local_elements() const { return product(local_shape); }
size_t TensorInfo::bytes() const { return static_cast<size_t>(elements()) * dtype_bytes(dtype); }
size_t TensorInfo::local_bytes() const {
  return static_cast<size_t>(local_elements()) * dtype_bytes(dtype);
}
std::string TensorInfo::type_str() const { return type_of(dtype, shape); }
std::string TensorInfo::local_type_str() const { return type_of(dtype, local_shape); }

std::string TensorInfo::spec_str() const {
  std::string s = "P(";
  for (size_t d = 0; d < spec.size(); ++d) {
    if (d) s += ", ";
    const auto& axes = spec[d];
    if (axes.empty()) {
      s += "None";
    } else if (axes.size() == 1) {
      s += "'" + axes[0] + "'";
    } else {
      s += "(";
      for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", '" : "'") + axes[i] + "'";
      s += ")";
    }
  }
  return s + (spec.size() == 1 && spec[0].size() > 1 ? ",)" : ")");
}

const TensorInfo* find_tensor(std::span<const TensorInfo> table, std::string_view name) noexcept {
  for (const TensorInfo& t : table)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorInfo& lookup_tensor(std::span<const TensorInfo> table, std::string_view name,
                                std::string_view kind, std::string_view program) {
  if (const TensorInfo* t = find_tensor(table, name)) return *t;
  std::string known;
  for (const TensorInfo& t : table) known += (known.empty() ? "\"" : ", \"") + std::string(t.name) + "\"";
  std::string msg = "no " + std::string(kind) + " \"" + std::string(name) + "\" in program " +
                    std::string(program) + "; ";
  msg += known.empty() ? "it has no " + std::string(kind) + "s"
                       : "its " + std::string(kind) + "s are " + known;
  throw std::out_of_range(msg);
}

void check_elements(const TensorInfo& t, size_t size, std::string_view call,
                    std::string_view kind) {
  if (size == static_cast<size_t>(t.elements())) return;
  throw std::invalid_argument(std::string(call) + "(\"" + std::string(t.name) + "\"): got " +
                              std::to_string(size) + " floats, but the " + std::string(kind) +
                              " " + t.type_str() + " has " + std::to_string(t.elements()));
}

}  // namespace sharc::rt
