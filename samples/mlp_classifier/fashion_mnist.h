// Fashion-MNIST for the MLP classifier sample: a reader of the gzipped IDX
// files that Debian's `dataset-fashion-mnist` package installs under
// /usr/share/datasets/fashion-mnist/ (60,000 training and 10,000 test images
// of 28x28 grey pixels, 10 classes), and a batcher that walks the training
// set in a shuffled order per epoch. It is sample code, not part of sharc: the
// generated programs only ever see float arrays. The one decision worth
// knowing: the shuffle is our own Fisher-Yates over a SplitMix64 stream, not
// std::shuffle, whose algorithm differs between standard libraries, so a
// (seed, epoch) gives the same batches everywhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fashion_mnist {

inline constexpr const char* kDefaultDir = "/usr/share/datasets/fashion-mnist";
inline constexpr const char* kDebianPackage = "dataset-fashion-mnist";
inline constexpr int kClasses = 10;

// The ten class names, in label order.
extern const char* const kClassNames[kClasses];

// One split, row-major: image i is images[i * pixels() ...], its label
// labels[i], a class id 0..9 stored as a float (what the programs take).
struct Split {
  int64_t count = 0;
  int64_t rows = 0, cols = 0;
  std::vector<float> images;  // (count, rows * cols), pixel / 255 in [0, 1]
  std::vector<float> labels;  // (count)

  int64_t pixels() const { return rows * cols; }
};

// Reads `<dir>/<prefix>-images-idx3-ubyte.gz` and `<dir>/<prefix>-labels-idx1-ubyte.gz`
// (prefix "train" or "t10k"). Throws std::runtime_error naming the file and
// what is wrong with it: missing (and which package installs it), not an
// IDX file of the expected kind, truncated, or images and labels that disagree
// in count; labels outside 0..9 are rejected too.
Split load(const std::string& dir, const std::string& prefix);

// Per-pixel-agnostic standardisation: x -> (x - mean) / stddev over every
// pixel of `s`. Returns {mean, stddev} so the same transform can be applied to
// the test split with standardize(test, mean, stddev).
struct Moments {
  double mean = 0, stddev = 1;
};
Moments moments(const Split& s);
void standardize(Split& s, const Moments& m);

// Walks a split in batches of `batch` examples. Epoch e visits the examples
// in a permutation that depends only on (seed, e); the last count % batch
// examples of each permutation are skipped, so every batch is full.
class Batcher {
 public:
  Batcher(const Split& split, int64_t batch, uint64_t seed);
  // Copies the next batch into images (batch * pixels floats) and labels
  // (batch floats), starting a new epoch when the current one is used up.
  void next(float* images, float* labels);
  int64_t epoch() const { return epoch_; }  // of the batch next() returns next
  int64_t batches_per_epoch() const { return split_.count / batch_; }

 private:
  void shuffle();

  const Split& split_;
  int64_t batch_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  int64_t cursor_ = 0;  // batches taken from this epoch
  std::vector<int64_t> order_;
};

}  // namespace fashion_mnist
