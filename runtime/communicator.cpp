// Backend-independent parts of Communicator: statistics formatting, the
// permutation check every backend must apply before sending anything (so a bad
// permutation fails on every member instead of deadlocking some), and the
// blocking ppermute built from its asynchronous halves.
#include "runtime/communicator.h"

#include <cstdio>
#include <stdexcept>
#include <string>

namespace sharc::rt {

std::byte* Communicator::scratch(int slot, size_t bytes) {
  if (slot < 0 || slot > 1)
    throw std::invalid_argument("Communicator::scratch: slot " + std::to_string(slot));
  if (bytes > scratch_bytes_[slot]) {
    scratch_[slot].reset();
    scratch_[slot].reset(static_cast<std::byte*>(::operator new(bytes, std::align_val_t{64})));
    scratch_bytes_[slot] = bytes;
  }
  return scratch_[slot].get();
}

const char* collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllToAll:
      return "all_to_all";
    case CollectiveKind::kPPermute:
      return "ppermute";
    case CollectiveKind::kSendRecv:
      return "send_recv";
  }
  return "unknown";
}

CommStats& CommStats::operator+=(const CommStats& other) {
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    bytes_sent[k] += other.bytes_sent[k];
    calls[k] += other.calls[k];
    seconds_in[k] += other.seconds_in[k];
  }
  return *this;
}

uint64_t CommStats::total_bytes() const {
  uint64_t t = 0;
  for (uint64_t b : bytes_sent) t += b;
  return t;
}

uint64_t CommStats::total_calls() const {
  uint64_t t = 0;
  for (uint64_t c : calls) t += c;
  return t;
}

double CommStats::total_seconds() const {
  double t = 0;
  for (double s : seconds_in) t += s;
  return t;
}

std::string CommStats::to_string() const {
  std::string s;
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    if (calls[k] == 0) continue;
    s += collective_kind_name(static_cast<CollectiveKind>(k));
    s += ": " + std::to_string(calls[k]) + (calls[k] == 1 ? " call, " : " calls, ") +
         std::to_string(bytes_sent[k]) + " bytes sent, ";
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.6f s\n", seconds_in[k]);
    s += secs;
  }
  return s;
}

void validate_permutation(const Permutation& perm, int group_size) {
  std::vector<bool> src_seen(group_size, false), dst_seen(group_size, false);
  for (const auto& [src, dst] : perm) {
    // Appended piece by piece: `"(" + std::to_string(...)` trips g++ 12's
    // -Wrestrict false positive (GCC bug 105329) at -O3.
    std::string pair = "(";
    pair += std::to_string(src);
    pair += ", ";
    pair += std::to_string(dst);
    pair += ")";
    if (src < 0 || src >= group_size || dst < 0 || dst >= group_size) {
      throw std::invalid_argument("ppermute: pair " + pair + " is out of range for a group of " +
                                  std::to_string(group_size));
    }
    if (src_seen[src]) {
      throw std::invalid_argument("ppermute: pair " + pair + " repeats source " +
                                  std::to_string(src) + "; perm must be a permutation");
    }
    if (dst_seen[dst]) {
      throw std::invalid_argument("ppermute: pair " + pair + " repeats destination " +
                                  std::to_string(dst) + "; perm must be a permutation");
    }
    src_seen[src] = dst_seen[dst] = true;
  }
}

}  // namespace sharc::rt
