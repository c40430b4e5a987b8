// TensorInfo accessors and the checked lookups generated programs use; see
// program_info.h.
#include "runtime/program_info.h"

#include <cstring>
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

std::vector<int64_t> block_offset(const TensorInfo& t, const MeshShape& mesh, int rank) {
  const std::vector<int> coords = mesh.coords(rank);
  std::vector<int64_t> offset(t.local_shape.size(), 0);
  for (size_t d = 0; d < offset.size() && d < t.spec.size(); ++d) {
    int64_t index = 0;
    for (const std::string& axis : t.spec[d]) {
      const int a = mesh.axis_index(axis);
      if (a < 0)
        throw std::invalid_argument("\"" + std::string(t.name) + "\" is split over axis '" + axis +
                                    "', not in mesh " + mesh.to_string());
      index = index * mesh.axis_sizes[a] + coords[a];
    }
    offset[d] = index * t.local_shape[d];
  }
  return offset;
}

std::vector<BlockRun> block_runs(const TensorInfo& t, const std::vector<int64_t>& offset) {
  const std::vector<int64_t>& gs = t.shape;
  const std::vector<int64_t>& ls = t.local_shape;
  const int rank = static_cast<int>(gs.size());
  if (rank == 0) return {BlockRun{0, 0, 1}};
  int k = rank - 1;  // dims after k are whole, so one run covers dims k..rank-1
  while (k > 0 && ls[k] == gs[k]) --k;
  int64_t run = 1;
  for (int d = k; d < rank; ++d) run *= ls[d];
  std::vector<int64_t> gstride(rank, 1);
  for (int d = rank - 2; d >= 0; --d) gstride[d] = gstride[d + 1] * gs[d + 1];
  int64_t runs = 1;
  for (int d = 0; d < k; ++d) runs *= ls[d];
  std::vector<BlockRun> out;
  out.reserve(static_cast<size_t>(runs));
  std::vector<int64_t> idx(k, 0);
  for (int64_t r = 0; r < runs; ++r) {
    int64_t g = offset[k] * gstride[k];
    for (int d = 0; d < k; ++d) g += (offset[d] + idx[d]) * gstride[d];
    out.push_back({g, r * run, run});
    for (int d = k - 1; d >= 0; --d) {
      if (++idx[d] < ls[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

void copy_block_from_global(const TensorInfo& t, const std::vector<int64_t>& offset, const void* global,
                            void* block) {
  const size_t e = dtype_bytes(t.dtype);
  for (const BlockRun& r : block_runs(t, offset))
    std::memcpy(static_cast<char*>(block) + r.block * e, static_cast<const char*>(global) + r.global * e,
                r.elements * e);
}

void copy_block_to_global(const TensorInfo& t, const std::vector<int64_t>& offset, const void* block,
                          void* global) {
  const size_t e = dtype_bytes(t.dtype);
  for (const BlockRun& r : block_runs(t, offset))
    std::memcpy(static_cast<char*>(global) + r.global * e, static_cast<const char*>(block) + r.block * e,
                r.elements * e);
}

void BlockTable::bind(std::span<const TensorInfo> table, std::string_view name, int rank, int devices, const void* data,
                      size_t elements, std::string_view dtype, std::string_view call, std::string_view program) {
  const TensorInfo& t = lookup_tensor(table, name, call.starts_with("Inputs") ? "input" : "output", program);
  const std::string what = std::string(call) + "(\"" + std::string(name) + "\", device " + std::to_string(rank) + ")";
  if (rank < 0 || rank >= devices)
    throw std::out_of_range(what + ": no such device; the mesh has " + std::to_string(devices));
  if (dtype != t.dtype)
    throw std::invalid_argument(what + ": the block is " + std::string(t.dtype) + "; pass " +
                                (t.dtype == "i32" ? "int32_t" : "float") + " values");
  if (elements != static_cast<size_t>(t.local_elements()))
    throw std::invalid_argument(what + ": got " + std::to_string(elements) + " elements, but the device's block " +
                                t.local_type_str() + " has " + std::to_string(t.local_elements()));
  if (!data) throw std::invalid_argument(what + ": null data");
  const size_t index = static_cast<size_t>(&t - table.data());
  for (Entry& e : entries_)
    if (e.index == index && e.rank == rank) {
      e.data = data;
      return;
    }
  entries_.push_back({index, rank, data});
}

const void* BlockTable::find(size_t index, int rank) const {
  for (const Entry& e : entries_)
    if (e.index == index && e.rank == rank) return e.data;
  return nullptr;
}

bool BlockTable::covers(size_t index, std::span<const int> ranks) const {
  for (int r : ranks)
    if (!find(index, r)) return false;
  return true;
}

void BlockTable::clear_marks(size_t tensors, int devices) {
  devices_ = static_cast<size_t>(devices);
  marks_.assign(tensors * devices_, 0);
}

void check_bound(const TensorInfo& t, size_t index, const void* global, const BlockTable& blocks,
                 std::span<const int> local_ranks, std::string_view kind, std::string_view field) {
  if (global) return;
  for (int r : local_ranks)
    if (!blocks.find(index, r))
      throw std::invalid_argument("forward: " + std::string(kind) + " \"" + std::string(t.name) + "\" " +
                                  t.type_str() + " has no global array (" + std::string(field) +
                                  ") and no block for device " + std::to_string(r) + " (" +
                                  (kind == "input" ? "Inputs" : "Outputs") + "::set_block)");
}

}  // namespace sharc::rt
