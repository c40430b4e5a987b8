// The gzipped IDX reader and the shuffling batcher; see fashion_mnist.h.
//
// IDX (the MNIST format): a big-endian uint32 magic 0x000008TT where 08 says
// unsigned bytes and TT the number of dimensions, one big-endian uint32 per
// dimension, then the bytes row-major. zlib's gzread reads the .gz files
// directly (and would read uncompressed files too).
#include "samples/mlp_classifier/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>

namespace fashion_mnist {

const char* const kClassNames[kClasses] = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                           "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                           "Bag",         "Ankle boot"};

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

void read_exactly(gzFile f, const std::string& path, void* out, size_t bytes, const char* what) {
  auto* p = static_cast<unsigned char*>(out);
  while (bytes > 0) {
    // gzread takes an unsigned count; read in chunks well below its limit.
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(bytes, 1u << 30));
    const int got = gzread(f, p, chunk);
    if (got < 0) {
      int err = 0;
      fail(path, std::string("cannot read ") + what + ": " + gzerror(f, &err));
    }
    if (got == 0) fail(path, std::string("truncated: the file ends inside the ") + what);
    p += got;
    bytes -= static_cast<size_t>(got);
  }
}

uint32_t read_be32(gzFile f, const std::string& path, const char* what) {
  unsigned char b[4];
  read_exactly(f, path, b, 4, what);
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

// Reads an IDX file of unsigned bytes with `rank` dimensions; returns the
// dimensions and fills `data`.
std::vector<int64_t> read_idx(const std::string& path, int rank, std::vector<unsigned char>& data) {
  if (!std::filesystem::exists(path)) {
    fail(path, std::string("not found. Fashion-MNIST comes from the Debian package '") +
                   kDebianPackage + "' (apt-get install " + kDebianPackage +
                   "), or pass --data-dir with the folder holding "
                   "the four *-ubyte.gz files");
  }
  GzHandle f(gzopen(path.c_str(), "rb"));
  if (!f) fail(path, "cannot open");
  const uint32_t magic = read_be32(f.get(), path, "header");
  const uint32_t want = 0x0800u | static_cast<uint32_t>(rank);
  if (magic != want) {
    char buf[96];
    std::snprintf(buf, sizeof buf,
                  "not an IDX file of %d-D unsigned bytes (magic 0x%08x, expected 0x%08x)", rank,
                  magic, want);
    fail(path, buf);
  }
  std::vector<int64_t> dims(rank);
  size_t total = 1;
  for (int d = 0; d < rank; ++d) {
    dims[d] = read_be32(f.get(), path, "header");
    if (dims[d] <= 0 || dims[d] > (1 << 24))
      fail(path, "implausible dimension " + std::to_string(dims[d]));
    total *= static_cast<size_t>(dims[d]);
  }
  data.resize(total);
  read_exactly(f.get(), path, data.data(), total, "data");
  unsigned char extra;
  if (gzread(f.get(), &extra, 1) != 0)
    fail(path, "has bytes after the " + std::to_string(total) + " it declares");
  return dims;
}

// SplitMix64: a tiny, well-mixed generator whose output is fixed by its seed.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), without modulo bias (rejection on the top slice).
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = next();
    while (x >= limit);
    return x % n;
  }
};

}  // namespace

Split load(const std::string& dir, const std::string& prefix) {
  const std::string image_path = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string label_path = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  std::vector<unsigned char> pixels, labels;
  const std::vector<int64_t> idims = read_idx(image_path, 3, pixels);
  const std::vector<int64_t> ldims = read_idx(label_path, 1, labels);
  if (idims[0] != ldims[0]) {
    fail(label_path, std::to_string(ldims[0]) + " labels for the " + std::to_string(idims[0]) +
                         " images of " + image_path);
  }
  Split s;
  s.count = idims[0];
  s.rows = idims[1];
  s.cols = idims[2];
  s.images.resize(pixels.size());
  for (size_t i = 0; i < pixels.size(); ++i) s.images[i] = static_cast<float>(pixels[i]) / 255.0f;
  s.labels.resize(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= kClasses) {
      fail(label_path, "label " + std::to_string(labels[i]) + " of example " + std::to_string(i) +
                           " is not a class id 0.." + std::to_string(kClasses - 1));
    }
    s.labels[i] = static_cast<float>(labels[i]);
  }
  return s;
}

Moments moments(const Split& s) {
  double sum = 0, sq = 0;
  for (float x : s.images) {
    sum += x;
    sq += static_cast<double>(x) * x;
  }
  const double n = static_cast<double>(s.images.size());
  Moments m;
  m.mean = sum / n;
  m.stddev = std::sqrt(std::max(sq / n - m.mean * m.mean, 1e-12));
  return m;
}

void standardize(Split& s, const Moments& m) {
  const float mean = static_cast<float>(m.mean), inv = static_cast<float>(1.0 / m.stddev);
  for (float& x : s.images) x = (x - mean) * inv;
}

Batcher::Batcher(const Split& split, int64_t batch, uint64_t seed)
    : split_(split), batch_(batch), seed_(seed) {
  if (batch < 1 || batch > split.count) {
    throw std::invalid_argument("Batcher: batch " + std::to_string(batch) + " for a split of " +
                                std::to_string(split.count) + " examples");
  }
  order_.resize(split.count);
  shuffle();
}

void Batcher::shuffle() {
  for (int64_t i = 0; i < split_.count; ++i) order_[i] = i;
  // One stream per (seed, epoch); Fisher-Yates from the back.
  SplitMix64 rng{seed_ * 0x632be59bd9b4e019ull + static_cast<uint64_t>(epoch_)};
  for (int64_t i = split_.count - 1; i > 0; --i)
    std::swap(order_[i], order_[static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1))]);
}

void Batcher::next(float* images, float* labels) {
  if (cursor_ == batches_per_epoch()) {
    ++epoch_;
    cursor_ = 0;
    shuffle();
  }
  const int64_t px = split_.pixels();
  for (int64_t b = 0; b < batch_; ++b) {
    const int64_t i = order_[cursor_ * batch_ + b];
    std::copy_n(split_.images.data() + i * px, px, images + b * px);
    labels[b] = split_.labels[i];
  }
  ++cursor_;
}

}  // namespace fashion_mnist
