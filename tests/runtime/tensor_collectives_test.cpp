// Dim-aware collectives on a 3-D tensor, for every dim (and every pair of dims
// for all_to_all), on 4 devices. References are built with slice_block() from
// one global tensor, and slice_block() itself is checked against index math.
#include "runtime/tensor_collectives.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "runtime/kernels.h"
#include "runtime/thread_world.h"

namespace sharc::rt {
namespace {

const std::vector<int64_t> kGlobal = {4, 8, 12};
constexpr int kDevices = 4;

std::vector<float> iota(size_t n, float start = 0.0f) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::vector<float> block(const std::vector<float>& t, const std::vector<int64_t>& shape, int dim,
                         int parts, int index) {
  std::vector<float> out(t.size() / parts);
  slice_block(t.data(), shape, dim, parts, index, out.data());
  return out;
}

std::vector<int64_t> divided(std::vector<int64_t> shape, int dim, int parts) {
  shape[dim] /= parts;
  return shape;
}

TEST(TensorCollectives, SliceBlockMatchesIndexMath) {
  const std::vector<float> t = iota(4 * 8 * 12);
  for (int dim = 0; dim < 3; ++dim) {
    for (int i = 0; i < 4; ++i) {
      const std::vector<float> b = block(t, kGlobal, dim, 4, i);
      const std::vector<int64_t> bs = divided(kGlobal, dim, 4);
      size_t k = 0;
      for (int64_t x = 0; x < bs[0]; ++x) {
        for (int64_t y = 0; y < bs[1]; ++y) {
          for (int64_t z = 0; z < bs[2]; ++z) {
            int64_t g[3] = {x, y, z};
            g[dim] += i * bs[dim];
            ASSERT_EQ(b[k++], t[(g[0] * 8 + g[1]) * 12 + g[2]]) << "dim " << dim << " block " << i;
          }
        }
      }
    }
  }
  std::vector<float> out(8);
  EXPECT_THROW(slice_block(t.data(), kGlobal, 2, 5, 0, out.data()), std::invalid_argument);
  EXPECT_THROW(slice_block(t.data(), kGlobal, 3, 2, 0, out.data()), std::invalid_argument);
}

TEST(TensorCollectives, AllGatherDimReassemblesTheGlobalTensor) {
  ThreadWorld world(MeshShape{{"x"}, {kDevices}});
  const std::vector<float> global = iota(4 * 8 * 12);
  for (int dim = 0; dim < 3; ++dim) {
    world.run([&](int r) {
      const std::vector<float> local = block(global, kGlobal, dim, kDevices, r);
      std::vector<float> out(global.size());
      all_gather_dim(world.comm(r), make_group(world.mesh(), r, {0}), local.data(),
                     divided(kGlobal, dim, kDevices), dim, out.data());
      EXPECT_EQ(out, global) << "dim " << dim << " rank " << r;
    });
  }
}

TEST(TensorCollectives, ReduceScatterDimGivesEachMemberItsReducedBlock) {
  ThreadWorld world(MeshShape{{"x"}, {kDevices}});
  const size_t n = 4 * 8 * 12;
  // Member p holds iota + 1000p; the sum is 4*iota + 6000.
  std::vector<float> sum = iota(n);
  for (float& v : sum) v = 4 * v + 6000;
  for (int dim = 0; dim < 3; ++dim) {
    world.run([&](int r) {
      const std::vector<float> full = iota(n, 1000.0f * r);
      std::vector<float> out(n / kDevices);
      reduce_scatter_dim(world.comm(r), make_group(world.mesh(), r, {0}), full.data(), kGlobal, dim,
                         out.data(), ReduceOp::kSum);
      EXPECT_EQ(out, block(sum, kGlobal, dim, kDevices, r)) << "dim " << dim << " rank " << r;
    });
  }
  world.run([&](int r) {
    std::vector<float> full(n), out(n);
    EXPECT_THROW(reduce_scatter_dim(world.comm(r), make_group(world.mesh(), r, {0}), full.data(),
                                    {4, 6, 12}, 1, out.data(), ReduceOp::kSum),
                 std::invalid_argument);
  });
}

TEST(TensorCollectives, AllToAllDimMovesTheShardedDim) {
  // Sharded along concat_dim before, along split_dim after: the mesh axis
  // moves from one tensor dim to another.
  ThreadWorld world(MeshShape{{"x"}, {kDevices}});
  const std::vector<float> global = iota(4 * 8 * 12);
  for (int split = 0; split < 3; ++split) {
    for (int concat = 0; concat < 3; ++concat) {
      if (split == concat) continue;
      world.run([&](int r) {
        const std::vector<float> local = block(global, kGlobal, concat, kDevices, r);
        std::vector<float> out(local.size());
        all_to_all_dim(world.comm(r), make_group(world.mesh(), r, {0}), local.data(),
                       divided(kGlobal, concat, kDevices), split, concat, out.data());
        EXPECT_EQ(out, block(global, kGlobal, split, kDevices, r))
            << "split " << split << " concat " << concat << " rank " << r;
      });
    }
  }
}

TEST(TensorCollectives, WrappersCountTheFlatCollectiveBytes) {
  ThreadWorld world(MeshShape{{"x"}, {kDevices}});
  const std::vector<float> global = iota(4 * 8 * 12);
  world.run([&](int r) {
    const std::vector<float> local = block(global, kGlobal, 1, kDevices, r);
    std::vector<float> out(global.size());
    all_gather_dim(world.comm(r), make_group(world.mesh(), r, {0}), local.data(),
                   divided(kGlobal, 1, kDevices), 1, out.data());
  });
  // (n-1) local blocks of 4*2*12 floats.
  EXPECT_EQ(world.comm(0).stats().bytes(CollectiveKind::kAllGather), 3u * 96 * 4);
}

}  // namespace
}  // namespace sharc::rt
