// visualize_sharding goldens on data=2,model=4: the three 2-D layouts from the
// JAX docs, a 1-D and a 3-D array, plus the error for an unknown axis.
#include "runtime/visualize.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace sharc::rt {
namespace {

const MeshShape kMesh{{"data", "model"}, {2, 4}};

TEST(Visualize, ColumnsShardedOverModel) {
  EXPECT_EQ(visualize_sharding({1024, 1024}, {{}, {"model"}}, kMesh),
            "shape (1024, 1024) sharding [{}, {\"model\"}] on mesh <[\"data\"=2, \"model\"=4]>, "
            "per device (1024, 256)\n"
            "+-----------+-----------+-----------+-----------+\n"
            "|  CPU 0,4  |  CPU 1,5  |  CPU 2,6  |  CPU 3,7  |\n"
            "+-----------+-----------+-----------+-----------+\n");
}

TEST(Visualize, RowsShardedOverModel) {
  EXPECT_EQ(visualize_sharding({1024, 1024}, {{"model"}, {}}, kMesh),
            "shape (1024, 1024) sharding [{\"model\"}, {}] on mesh <[\"data\"=2, \"model\"=4]>, "
            "per device (256, 1024)\n"
            "+-----------+\n"
            "|  CPU 0,4  |\n"
            "+-----------+\n"
            "|  CPU 1,5  |\n"
            "+-----------+\n"
            "|  CPU 2,6  |\n"
            "+-----------+\n"
            "|  CPU 3,7  |\n"
            "+-----------+\n");
}

TEST(Visualize, RowsShardedOverData) {
  EXPECT_EQ(visualize_sharding({1024, 1024}, {{"data"}, {}}, kMesh),
            "shape (1024, 1024) sharding [{\"data\"}, {}] on mesh <[\"data\"=2, \"model\"=4]>, "
            "per device (512, 1024)\n"
            "+---------------+\n"
            "|  CPU 0,1,2,3  |\n"
            "+---------------+\n"
            "|  CPU 4,5,6,7  |\n"
            "+---------------+\n");
}

TEST(Visualize, BothDimsSharded) {
  EXPECT_EQ(visualize_sharding({8, 16}, {{"data"}, {"model"}}, kMesh),
            "shape (8, 16) sharding [{\"data\"}, {\"model\"}] on mesh <[\"data\"=2, \"model\"=4]>, "
            "per device (4, 4)\n"
            "+---------+---------+---------+---------+\n"
            "|  CPU 0  |  CPU 1  |  CPU 2  |  CPU 3  |\n"
            "+---------+---------+---------+---------+\n"
            "|  CPU 4  |  CPU 5  |  CPU 6  |  CPU 7  |\n"
            "+---------+---------+---------+---------+\n");
}

TEST(Visualize, TwoAxesOnOneDimFollowSpecOrder) {
  // {"model", "data"}: block = model*2 + data, so ranks interleave.
  const std::string s = visualize_sharding({8, 16}, {{"model", "data"}, {}}, kMesh);
  EXPECT_NE(s.find("per device (1, 16)\n"), std::string::npos) << s;
  EXPECT_NE(s.find("|  CPU 0  |\n+---------+\n|  CPU 4  |\n+---------+\n|  CPU 1  |"),
            std::string::npos)
      << s;
}

TEST(Visualize, OneDimensional) {
  EXPECT_EQ(visualize_sharding({64}, {{"model"}}, kMesh),
            "shape (64,) sharding [{\"model\"}] on mesh <[\"data\"=2, \"model\"=4]>, "
            "per device (16,)\n"
            "+-----------+-----------+-----------+-----------+\n"
            "|  CPU 0,4  |  CPU 1,5  |  CPU 2,6  |  CPU 3,7  |\n"
            "+-----------+-----------+-----------+-----------+\n");
  EXPECT_EQ(visualize_sharding({64}, {{}}, kMesh),
            "shape (64,) sharding [{}] on mesh <[\"data\"=2, \"model\"=4]>, per device (64,)\n"
            "+-----------------------+\n"
            "|  CPU 0,1,2,3,4,5,6,7  |\n"
            "+-----------------------+\n");
}

TEST(Visualize, ThreeDimensionalPrintsOneTablePerLeadingBlock) {
  EXPECT_EQ(visualize_sharding({8, 16, 32}, {{"data"}, {}, {"model"}}, kMesh),
            "shape (8, 16, 32) sharding [{\"data\"}, {}, {\"model\"}] on mesh "
            "<[\"data\"=2, \"model\"=4]>, per device (4, 16, 8)\n"
            "[block 0, :, :]\n"
            "+---------+---------+---------+---------+\n"
            "|  CPU 0  |  CPU 1  |  CPU 2  |  CPU 3  |\n"
            "+---------+---------+---------+---------+\n"
            "[block 1, :, :]\n"
            "+---------+---------+---------+---------+\n"
            "|  CPU 4  |  CPU 5  |  CPU 6  |  CPU 7  |\n"
            "+---------+---------+---------+---------+\n");
}

TEST(Visualize, UnevenShardsAreFlagged) {
  const std::string s = visualize_sharding({10, 16}, {{"model"}, {}}, kMesh);
  EXPECT_NE(s.find(", per device uneven\n"), std::string::npos) << s;
}

TEST(Visualize, UnknownAxisIsAnError) {
  try {
    visualize_sharding({8, 16}, {{"pipe"}, {}}, kMesh);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "visualize_sharding: axis \"pipe\" in [{\"pipe\"}, {}] is not in mesh "
                 "<[\"data\"=2, \"model\"=4]>");
  }
  EXPECT_THROW(visualize_sharding({8, 16}, {{"data"}, {"data"}}, kMesh), std::invalid_argument);
  EXPECT_THROW(visualize_sharding({8, 16}, {{"data"}}, kMesh), std::invalid_argument);
}

}  // namespace
}  // namespace sharc::rt
