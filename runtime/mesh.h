// MeshShape and Group: how the runtime names devices. A MeshShape is the plain
// runtime twin of the DSL's mesh (no diagnostics, no "-1 = the rest"); a Group is
// the set of devices one collective runs over, plus the caller's place in it.
// Ranks are numbered row-major with the LAST axis fastest, so on data=2,model=4
// rank = data*4 + model, exactly like jax.sharding.Mesh over np.arange(8).reshape(2, 4).
// A group's order is the order of the mesh axes it spans *as listed by the
// caller*, because that order decides which shard of a tensor each member holds.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sharc::rt {

struct MeshShape {
  std::vector<std::string> axis_names;  // major to minor
  std::vector<int> axis_sizes;          // same length as axis_names, each >= 1

  // Product of axis_sizes; 1 for a mesh with no axes.
  int num_devices() const;
  // Position of `name` in axis_names, -1 when absent.
  int axis_index(std::string_view name) const;
  // Row-major coordinates of `rank`, one per axis. Throws std::out_of_range.
  std::vector<int> coords(int rank) const;
  // Inverse of coords(). Throws std::out_of_range on a bad coordinate.
  int rank_of(const std::vector<int>& coords) const;
  // The device with `rank`'s coordinates except `position` on axis `axis`
  // (a pipeline stage's neighbour). Throws std::out_of_range.
  int peer_on_axis(int rank, int axis, int position) const;
  // "device 3 (pipe=1, data=1)": a trace track's name.
  std::string describe(int rank) const;
  // <["data"=2, "model"=4]>, the one text spelling used everywhere in sharc.
  std::string to_string() const;
};

// The devices taking part in one collective, in the order that defines chunk
// positions (chunk p of an all_gather comes from ranks[p]).
struct Group {
  std::vector<int> ranks;
  int position = 0;  // of the calling device in `ranks`

  int size() const { return static_cast<int>(ranks.size()); }
};

// The devices that share `rank`'s coordinates on every axis NOT in `axes`,
// ordered row-major over the coordinates on `axes` in the order given: axes
// {data, model} orders by data*|model| + model. Empty axes give a group of one.
// Throws std::invalid_argument on an out-of-range or repeated axis index.
Group make_group(const MeshShape& mesh, int rank, const std::vector<int>& axes);

}  // namespace sharc::rt
