// MeshShape rank/coordinate arithmetic and make_group() ordering on the
// canonical data=2,model=4 mesh, where the expected groups are the ones
// jax.sharding.Mesh(np.arange(8).reshape(2, 4)) gives.
#include "runtime/mesh.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace sharc::rt {
namespace {

MeshShape data2_model4() {
  return MeshShape{{"data", "model"}, {2, 4}};
}

TEST(Mesh, SizeIndexAndText) {
  const MeshShape m = data2_model4();
  EXPECT_EQ(m.num_devices(), 8);
  EXPECT_EQ(m.axis_index("data"), 0);
  EXPECT_EQ(m.axis_index("model"), 1);
  EXPECT_EQ(m.axis_index("pipe"), -1);
  EXPECT_EQ(m.to_string(), "<[\"data\"=2, \"model\"=4]>");
  EXPECT_EQ(MeshShape{}.num_devices(), 1);
  EXPECT_EQ(MeshShape{}.to_string(), "<[]>");
}

TEST(Mesh, CoordsAreRowMajorLastAxisFastest) {
  const MeshShape m = data2_model4();
  EXPECT_EQ(m.coords(0), (std::vector<int>{0, 0}));
  EXPECT_EQ(m.coords(3), (std::vector<int>{0, 3}));
  EXPECT_EQ(m.coords(4), (std::vector<int>{1, 0}));
  EXPECT_EQ(m.coords(6), (std::vector<int>{1, 2}));
  for (int r = 0; r < 8; ++r) EXPECT_EQ(m.rank_of(m.coords(r)), r);
  EXPECT_THROW(m.coords(8), std::out_of_range);
  EXPECT_THROW(m.rank_of({2, 0}), std::out_of_range);
  EXPECT_THROW(m.rank_of({0}), std::out_of_range);
}

TEST(Mesh, GroupsAlongOneAxis) {
  const MeshShape m = data2_model4();
  const std::vector<std::vector<int>> model_groups = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  const std::vector<std::vector<int>> data_groups = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  for (int r = 0; r < 8; ++r) {
    const Group g = make_group(m, r, {1});
    EXPECT_EQ(g.ranks, model_groups[r / 4]) << "rank " << r;
    EXPECT_EQ(g.position, r % 4);
    EXPECT_EQ(g.size(), 4);
    const Group d = make_group(m, r, {0});
    EXPECT_EQ(d.ranks, data_groups[r % 4]) << "rank " << r;
    EXPECT_EQ(d.position, r / 4);
  }
}

TEST(Mesh, GroupOrderFollowsTheAxesAsGiven) {
  const MeshShape m = data2_model4();
  // {data, model}: position = data*4 + model, i.e. plain rank order.
  const Group dm = make_group(m, 6, {0, 1});
  EXPECT_EQ(dm.ranks, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(dm.position, 6);
  // {model, data}: position = model*2 + data.
  const Group md = make_group(m, 6, {1, 0});
  EXPECT_EQ(md.ranks, (std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7}));
  EXPECT_EQ(md.position, 5);
  EXPECT_EQ(md.ranks[md.position], 6);
}

TEST(Mesh, EmptyAxesGiveAGroupOfOne) {
  const Group g = make_group(data2_model4(), 5, {});
  EXPECT_EQ(g.ranks, std::vector<int>{5});
  EXPECT_EQ(g.position, 0);
}

TEST(Mesh, ThreeAxisGroupKeepsOtherCoordinates) {
  const MeshShape m{{"a", "b", "c"}, {2, 3, 2}};
  // rank 9 = (1, 1, 1); group over {a, c} varies a and c with b fixed at 1.
  const Group g = make_group(m, 9, {0, 2});
  EXPECT_EQ(g.ranks, (std::vector<int>{2, 3, 8, 9}));
  EXPECT_EQ(g.position, 3);
}

TEST(Mesh, BadAxisIsRejected) {
  EXPECT_THROW(make_group(data2_model4(), 0, {2}), std::invalid_argument);
  EXPECT_THROW(make_group(data2_model4(), 0, {1, 1}), std::invalid_argument);
}

}  // namespace
}  // namespace sharc::rt
