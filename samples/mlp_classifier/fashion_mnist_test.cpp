// The Fashion-MNIST reader and batcher on small IDX files written here with
// zlib (so the tests need neither the data set nor the network): values and
// labels round-trip, each malformed file gets its own message, and the
// batcher's order is a deterministic permutation per (seed, epoch).
#include "samples/mlp_classifier/fashion_mnist.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace fashion_mnist {
namespace {

namespace fs = std::filesystem;

std::vector<unsigned char> be32(uint32_t v) {
  return {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
          static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
}

void write_gz(const fs::path& path, const std::vector<unsigned char>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(f);
}

// An IDX file: magic 0x000008<rank>, the dimensions, then `data`.
std::vector<unsigned char> idx(const std::vector<uint32_t>& dims,
                               const std::vector<unsigned char>& data, uint32_t magic = 0) {
  std::vector<unsigned char> out =
      be32(magic ? magic : 0x0800u + static_cast<uint32_t>(dims.size()));
  for (uint32_t d : dims) {
    const auto b = be32(d);
    out.insert(out.end(), b.begin(), b.end());
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

class FashionMnistTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sharc_fashion_mnist_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A split of `n` 2x3 images whose pixel j of image i is 10 * i + j, and
  // labels i % 10.
  void write_split(const std::string& prefix, uint32_t n) {
    std::vector<unsigned char> px, labels;
    for (uint32_t i = 0; i < n; ++i) {
      for (uint32_t j = 0; j < 6; ++j) px.push_back(static_cast<unsigned char>(10 * i + j));
      labels.push_back(static_cast<unsigned char>(i % 10));
    }
    write_gz(dir_ / (prefix + "-images-idx3-ubyte.gz"), idx({n, 2, 3}, px));
    write_gz(dir_ / (prefix + "-labels-idx1-ubyte.gz"), idx({n}, labels));
  }

  std::string load_error(const std::string& prefix) {
    try {
      load(dir_.string(), prefix);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "(no error)";
  }

  fs::path dir_;
};

TEST_F(FashionMnistTest, ReadsPixelsScaledToUnitIntervalAndLabels) {
  write_split("train", 12);
  const Split s = load(dir_.string(), "train");
  ASSERT_EQ(s.count, 12);
  EXPECT_EQ(s.rows, 2);
  EXPECT_EQ(s.cols, 3);
  ASSERT_EQ(s.images.size(), 72u);
  EXPECT_FLOAT_EQ(s.images[0], 0.0f);
  EXPECT_FLOAT_EQ(s.images[7 * 6 + 4], 74.0f / 255.0f);
  EXPECT_EQ(s.labels[11], 1.0f);
}

TEST_F(FashionMnistTest, StandardizeGivesZeroMeanUnitDeviation) {
  write_split("train", 12);
  Split s = load(dir_.string(), "train");
  standardize(s, moments(s));
  const Moments m = moments(s);
  EXPECT_NEAR(m.mean, 0.0, 1e-6);
  EXPECT_NEAR(m.stddev, 1.0, 1e-5);
}

TEST_F(FashionMnistTest, MissingFileNamesThePathAndThePackage) {
  EXPECT_EQ(
      load_error("t10k"),
      (dir_ / "t10k-images-idx3-ubyte.gz").string() +
          ": not found. Fashion-MNIST comes from the Debian package 'dataset-fashion-mnist' "
          "(apt-get install dataset-fashion-mnist), or pass --data-dir with the folder holding "
          "the four *-ubyte.gz files");
}

TEST_F(FashionMnistTest, WrongMagicIsRejected) {
  write_split("train", 4);
  write_gz(dir_ / "train-labels-idx1-ubyte.gz", idx({4}, {0, 1, 2, 3}, 0x0803));
  EXPECT_EQ(load_error("train"), (dir_ / "train-labels-idx1-ubyte.gz").string() +
                                     ": not an IDX file of 1-D unsigned bytes (magic 0x00000803, "
                                     "expected 0x00000801)");
}

TEST_F(FashionMnistTest, TruncatedDataIsRejected) {
  write_split("train", 4);
  write_gz(dir_ / "train-images-idx3-ubyte.gz", idx({4, 2, 3}, std::vector<unsigned char>(23)));
  EXPECT_EQ(load_error("train"), (dir_ / "train-images-idx3-ubyte.gz").string() +
                                     ": truncated: the file ends inside the data");
}

TEST_F(FashionMnistTest, TrailingBytesAreRejected) {
  write_split("train", 4);
  write_gz(dir_ / "train-labels-idx1-ubyte.gz", idx({4}, {0, 1, 2, 3, 4}));
  EXPECT_EQ(load_error("train"),
            (dir_ / "train-labels-idx1-ubyte.gz").string() + ": has bytes after the 4 it declares");
}

TEST_F(FashionMnistTest, CountMismatchIsRejected) {
  write_split("train", 4);
  write_gz(dir_ / "train-labels-idx1-ubyte.gz", idx({3}, {0, 1, 2}));
  EXPECT_EQ(load_error("train"), (dir_ / "train-labels-idx1-ubyte.gz").string() +
                                     ": 3 labels for the 4 images of " +
                                     (dir_ / "train-images-idx3-ubyte.gz").string());
}

TEST_F(FashionMnistTest, LabelOutOfRangeIsRejected) {
  write_split("train", 4);
  write_gz(dir_ / "train-labels-idx1-ubyte.gz", idx({4}, {0, 1, 10, 3}));
  EXPECT_EQ(load_error("train"), (dir_ / "train-labels-idx1-ubyte.gz").string() +
                                     ": label 10 of example 2 is not a class id 0..9");
}

// The labels of every batch of `epochs` epochs (labels are unique ids here).
std::vector<std::vector<float>> batches(const Split& s, int64_t batch, uint64_t seed,
                                        int64_t epochs) {
  Batcher b(s, batch, seed);
  std::vector<std::vector<float>> out;
  std::vector<float> images(batch * s.pixels()), labels(batch);
  for (int64_t i = 0; i < epochs * b.batches_per_epoch(); ++i) {
    b.next(images.data(), labels.data());
    // The image travels with its label: pixel 0 of example k is k / 255.
    for (int64_t j = 0; j < batch; ++j) EXPECT_FLOAT_EQ(images[j * s.pixels()], labels[j] / 255.0f);
    out.push_back(labels);
  }
  return out;
}

TEST(Batcher, EachEpochIsADeterministicPermutationThatDropsTheRemainder) {
  Split s;
  s.count = 100;
  s.rows = 1;
  s.cols = 2;
  for (int i = 0; i < 100; ++i) {
    s.images.push_back(static_cast<float>(i) / 255.0f);
    s.images.push_back(0.0f);
    s.labels.push_back(static_cast<float>(i));  // an id, to follow examples
  }
  const auto a = batches(s, 8, 7, 3);
  ASSERT_EQ(a.size(), 36u);  // 12 full batches of 8 per epoch, 4 examples left out
  EXPECT_EQ(a, batches(s, 8, 7, 3)) << "same seed, same batches";
  EXPECT_NE(a, batches(s, 8, 8, 3)) << "another seed, another order";
  std::vector<std::set<float>> seen(3);
  for (size_t i = 0; i < a.size(); ++i) seen[i / 12].insert(a[i].begin(), a[i].end());
  for (const auto& epoch : seen) EXPECT_EQ(epoch.size(), 96u) << "no example twice in an epoch";
  EXPECT_NE(a[0], a[12]) << "each epoch is reshuffled";
}

}  // namespace
}  // namespace fashion_mnist
