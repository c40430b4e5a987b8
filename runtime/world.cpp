// complete_global: the one collective a World offers beyond its devices'
// Communicators; see world.h.
#include "runtime/world.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace sharc::rt {

void complete_global(World& world, const TensorInfo& t, std::span<float> global,
                     std::span<const uint8_t> written) {
  if (world.processes() == 1) return;
  const MeshShape& mesh = world.mesh();
  const int devices = mesh.num_devices();
  std::vector<int> all_axes(mesh.axis_names.size());
  std::iota(all_axes.begin(), all_axes.end(), 0);
  // One slot per device: a flag (1: the block below was written), then the
  // block. Gathered from every device, every device has every slot.
  const size_t n = static_cast<size_t>(t.local_elements());
  const std::vector<int> local = world.local_ranks();
  world.run([&](int rank) {
    std::vector<float> mine(n + 1, 0.0f), all((n + 1) * static_cast<size_t>(devices));
    if (written[static_cast<size_t>(rank)]) {
      mine[0] = 1.0f;
      copy_block_from_global(t, block_offset(t, mesh, rank), global.data(), mine.data() + 1);
    }
    world.comm(rank).all_gather(mine.data(), all.data(), n + 1, make_group(mesh, rank, all_axes));
    // Every device has read its block out of `global` once its gather is
    // done (ours included the others' blocks), so the lowest local device
    // may now write the remote ones in.
    if (rank != local.front()) return;
    for (int q = 0; q < devices; ++q) {
      const float* slot = all.data() + static_cast<size_t>(q) * (n + 1);
      if (world.is_local(q) || slot[0] == 0.0f) continue;
      copy_block_to_global(t, block_offset(t, mesh, q), slot + 1, global.data());
    }
  });
}

}  // namespace sharc::rt
