// sharc's GPU kernels (runtime/gpu) against fp64 references of what each
// computes, on small shapes chosen to cross every tile and warp boundary
// (rows that are not a multiple of the rows per block, columns that are not a
// multiple of 32, sequences that end inside a tile).
//
// Built twice (tests/gpu/CMakeLists.txt): gpu_kernels_sim_test runs the
// kernels on the block simulator (CI, no GPU), gpu_kernels_cuda_test on the
// CUDA device (label `cuda`), where every test skips with the reason when
// there is none.
//
// Tolerances, stated once: with f32 activations every result is within 1e-4
// relative to the largest reference value of its tensor (f32 rounding over
// sums of up to a few thousand terms, and the device's expf). With bf16
// activations the inputs are rounded to bf16 before the reference sees them
// and results are compared within 2^-7 (two bf16 roundings) relative to the
// largest reference value, plus the f32 term; attention's bf16 gradients get
// 2^-6, since the recomputed probabilities see bf16 inputs twice.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/gpu/kernel_set.h"

namespace sharc::rt {
// gtest prints test parameters with this.
inline void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }
}  // namespace sharc::rt

namespace sharc::gpu {
namespace {

KernelSet* kernels_or_skip_reason(std::string* why) {
#if SHARC_GPU_TEST_CUDA
  return cuda_kernels(why);
#else
  (void)why;
  return &simulated_kernels();
#endif
}

class GpuKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    k_ = kernels_or_skip_reason(&why);
    if (!k_) GTEST_SKIP() << why;
  }
  void TearDown() override {
    for (void* p : owned_) k_->release(p);
  }

  // A device copy of host values, as `dtype` (f32 values rounded for bf16).
  void* to_device(const std::vector<float>& v, DType dtype = DType::kF32) {
    void* p = alloc(v.size() * rt::dtype_size(dtype));
    if (dtype == DType::kBF16) {
      std::vector<rt::bf16> b(v.begin(), v.end());
      k_->upload(p, b.data(), b.size() * 2);
    } else {
      k_->upload(p, v.data(), v.size() * 4);
    }
    return p;
  }
  void* to_device(const std::vector<int32_t>& v) {
    void* p = alloc(v.size() * 4);
    k_->upload(p, v.data(), v.size() * 4);
    return p;
  }
  float* f32(const std::vector<float>& v) { return static_cast<float*>(to_device(v)); }
  void* alloc(size_t bytes) {
    void* p = k_->alloc(bytes);
    owned_.push_back(p);
    return p;
  }
  std::vector<float> to_host(const void* p, size_t n, DType dtype = DType::kF32) {
    k_->synchronize();
    std::vector<float> out(n);
    if (dtype == DType::kBF16) {
      std::vector<rt::bf16> b(n);
      k_->download(b.data(), p, n * 2);
      for (size_t i = 0; i < n; ++i) out[i] = b[i];
    } else {
      k_->download(out.data(), p, n * 4);
    }
    return out;
  }

  KernelSet* k_ = nullptr;
  std::vector<void*> owned_;
};

std::vector<float> random_values(size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// What the device sees of host values stored as dtype.
std::vector<double> as_stored(const std::vector<float>& v, DType dtype) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = dtype == DType::kBF16 ? rt::round_to_bf16(v[i]) : v[i];
  return out;
}

double bound_for(DType dtype, double scale = 1.0) {
  return dtype == DType::kBF16 ? scale * std::ldexp(1.0, -7) + 1e-4 : 1e-4;
}

// Every element within bound * max|ref| (and max|ref| at least 1e-3 in that
// product, so all-zero references still allow f32 noise).
void expect_close(const std::vector<float>& got, const std::vector<double>& ref, double bound,
                  const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double scale = 1e-3;
  for (double r : ref) scale = std::max(scale, std::abs(r));
  size_t worst = 0;
  double worst_err = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::abs(got[i] - ref[i]);
    if (!(err <= worst_err)) {  // NaN counts as worst
      worst_err = err;
      worst = i;
    }
  }
  EXPECT_LE(worst_err, bound * scale)
      << what << ": element " << worst << " is " << got[worst] << ", the reference "
      << ref[worst] << " (max |ref| " << scale << ")";
}

class GpuKernelsByType : public GpuKernels, public ::testing::WithParamInterface<DType> {};

std::string type_name(const ::testing::TestParamInfo<DType>& info) {
  return std::string(rt::dtype_name(info.param));
}

// --------------------------------------------------------------------------
// LayerNorm

struct LayerNormRef {
  std::vector<double> out, mean, rstd;
};
LayerNormRef layernorm_ref(const std::vector<double>& x, const std::vector<float>& w,
                           const std::vector<float>& b, int rows, int cols, double eps) {
  LayerNormRef r{std::vector<double>(x.size()), std::vector<double>(rows),
                 std::vector<double>(rows)};
  for (int i = 0; i < rows; ++i) {
    double m = 0, v = 0;
    for (int c = 0; c < cols; ++c) m += x[i * cols + c];
    m /= cols;
    for (int c = 0; c < cols; ++c) v += (x[i * cols + c] - m) * (x[i * cols + c] - m);
    const double rs = 1.0 / std::sqrt(v / cols + eps);
    r.mean[i] = m;
    r.rstd[i] = rs;
    for (int c = 0; c < cols; ++c) r.out[i * cols + c] = (x[i * cols + c] - m) * rs * w[c] + b[c];
  }
  return r;
}

TEST_P(GpuKernelsByType, LayerNormForwardMatchesTheReference) {
  const DType t = GetParam();
  const int rows = 37, cols = 77;  // 5 blocks of 8 rows, the last part full; 3 column passes
  auto x = random_values(rows * cols, 1, -2.0f, 3.0f);
  auto w = random_values(cols, 2, 0.5f, 1.5f), b = random_values(cols, 3);
  LayerNormForward a;
  a.dtype = t;
  a.x = to_device(x, t);
  a.w = f32(w);
  a.b = f32(b);
  a.out = alloc(x.size() * rt::dtype_size(t));
  a.mean = static_cast<float*>(alloc(rows * 4));
  a.rstd = static_cast<float*>(alloc(rows * 4));
  a.rows = rows;
  a.cols = cols;
  a.eps = 1e-5f;
  k_->layernorm_forward(a);
  const auto ref = layernorm_ref(as_stored(x, t), w, b, rows, cols, 1e-5);
  expect_close(to_host(a.out, x.size(), t), ref.out, bound_for(t), "out");
  expect_close(to_host(a.mean, rows), ref.mean, 1e-4, "mean");
  expect_close(to_host(a.rstd, rows), ref.rstd, 1e-4, "rstd");
}

TEST_P(GpuKernelsByType, LayerNormBackwardMatchesTheReferenceAndAccumulates) {
  const DType t = GetParam();
  // 9 slices of kLayerNormSliceRows (256) rows for dw/db, the last partial,
  // summed by 8 warps (one takes two slices). 45 columns: one element at a
  // time, 2 tiles of 32 columns; 264: 16 bytes at a time (8 bf16, 4 f32),
  // 33 (66) runs, so a lane takes two runs of a row and the last block of
  // 32 runs is partial.
  for (const int cols : {45, 264}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    const int rows = 2200;
    auto x = random_values(rows * cols, 4, -2.0f, 2.0f);
    auto dout = random_values(rows * cols, 5);
    auto w = random_values(cols, 6, 0.5f, 1.5f), b = random_values(cols, 7);
    const auto xs = as_stored(x, t), gs = as_stored(dout, t);
    const auto fwd = layernorm_ref(xs, w, b, rows, cols, 1e-5);
    std::vector<float> mean(fwd.mean.begin(), fwd.mean.end()), rstd(fwd.rstd.begin(), fwd.rstd.end());
    auto dx0 = random_values(rows * cols, 8), dw0 = random_values(cols, 9), db0 = random_values(cols, 10);
    const auto dx0s = as_stored(dx0, t);

    std::vector<double> dx(rows * cols), dw(cols), db(cols);
    for (int i = 0; i < rows; ++i) {
      double mg = 0, mgx = 0;
      for (int c = 0; c < cols; ++c) {
        const double g = gs[i * cols + c] * w[c], xh = (xs[i * cols + c] - mean[i]) * rstd[i];
        mg += g;
        mgx += g * xh;
        dw[c] += gs[i * cols + c] * xh;
        db[c] += gs[i * cols + c];
      }
      mg /= cols;
      mgx /= cols;
      for (int c = 0; c < cols; ++c) {
        const double g = gs[i * cols + c] * w[c], xh = (xs[i * cols + c] - mean[i]) * rstd[i];
        dx[i * cols + c] = rstd[i] * (g - mg - xh * mgx);
      }
    }
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(accumulate ? "accumulate" : "write");
      LayerNormBackward a;
      a.dtype = t;
      a.dx = to_device(dx0, t);
      a.dw = f32(dw0);
      a.db = f32(db0);
      a.scratch = static_cast<float*>(alloc(layernorm_backward_scratch(rows, cols) * 4));
      a.dout = to_device(dout, t);
      a.x = to_device(x, t);
      a.w = f32(w);
      a.mean = f32(mean);
      a.rstd = f32(rstd);
      a.rows = rows;
      a.cols = cols;
      a.accumulate = accumulate;
      a.accumulate_params = accumulate;
      k_->layernorm_backward(a);
      std::vector<double> want_dx = dx, want_dw = dw, want_db = db;
      if (accumulate) {
        for (size_t i = 0; i < dx.size(); ++i) want_dx[i] += dx0s[i];
        for (int c = 0; c < cols; ++c) {
          want_dw[c] += dw0[c];
          want_db[c] += db0[c];
        }
      }
      expect_close(to_host(a.dx, dx.size(), t), want_dx, bound_for(t), "dx");
      expect_close(to_host(a.dw, cols), want_dw, 1e-4, "dw");
      expect_close(to_host(a.db, cols), want_db, 1e-4, "db");
    }
  }
}

TEST_P(GpuKernelsByType, LayerNormForwardFusesTheResidualAdd) {
  const DType t = GetParam();
  const int rows = 19, cols = 100;
  auto x = random_values(rows * cols, 13), r = random_values(rows * cols, 14);
  auto w = random_values(cols, 15, 0.5f, 1.5f), b = random_values(cols, 16);
  const auto xs = as_stored(x, t), rs = as_stored(r, t);
  std::vector<double> sum(xs.size());
  for (size_t i = 0; i < sum.size(); ++i)
    sum[i] = t == DType::kBF16 ? rt::round_to_bf16(static_cast<float>(xs[i] + rs[i])) : xs[i] + rs[i];
  LayerNormForward a;
  a.dtype = t;
  a.x = to_device(x, t);
  a.add = to_device(r, t);
  a.sum_out = alloc(x.size() * rt::dtype_size(t));
  a.w = f32(w);
  a.b = f32(b);
  a.out = alloc(x.size() * rt::dtype_size(t));
  a.rows = rows;
  a.cols = cols;
  k_->layernorm_forward(a);
  expect_close(to_host(a.sum_out, sum.size(), t), sum, 1e-6, "x + add");
  expect_close(to_host(a.out, sum.size(), t), layernorm_ref(sum, w, b, rows, cols, 1e-5).out,
               bound_for(t), "out");
}

// --------------------------------------------------------------------------
// Embeddings

TEST_P(GpuKernelsByType, EmbeddingForwardAndBackwardMatchTheReference) {
  const DType t = GetParam();
  const int batch = 3, seq = 11, cols = 300, vocab = 17;
  const int rows = batch * seq;
  std::vector<int32_t> ids(rows);
  std::mt19937 rng(17);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % 9);  // repeats, and unused tokens
  ids[5] = vocab - 1;
  auto wte = random_values(vocab * cols, 18), wpe = random_values(seq * cols, 19);
  Embedding e;
  e.dtype = t;
  e.out = alloc(rows * cols * rt::dtype_size(t));
  e.ids = static_cast<const int32_t*>(to_device(ids));
  e.wte = f32(wte);
  e.wpe = f32(wpe);
  e.rows = rows;
  e.cols = cols;
  e.seq = seq;
  e.vocab = vocab;
  k_->embedding_forward(e);
  std::vector<double> out(rows * cols);
  for (int n = 0; n < rows; ++n)
    for (int c = 0; c < cols; ++c)
      out[n * cols + c] = double{wte[ids[n] * cols + c]} + wpe[(n % seq) * cols + c];
  expect_close(to_host(e.out, out.size(), t), out, bound_for(t), "out");

  auto dout = random_values(rows * cols, 20);
  const auto ds = as_stored(dout, t);
  auto dwte0 = random_values(vocab * cols, 21), dwpe0 = random_values(seq * cols, 22);
  std::vector<double> dwte(dwte0.begin(), dwte0.end()), dwpe(dwpe0.begin(), dwpe0.end());
  for (int n = 0; n < rows; ++n)
    for (int c = 0; c < cols; ++c) {
      dwte[ids[n] * cols + c] += ds[n * cols + c];
      dwpe[(n % seq) * cols + c] += ds[n * cols + c];
    }
  const EmbeddingBuckets buckets = embedding_buckets(ids.data(), rows);
  ASSERT_EQ(buckets.starts.size(), buckets.tokens.size() + 1);
  EmbeddingBackward g;
  g.dtype = t;
  g.dwte = f32(dwte0);
  g.dwpe = f32(dwpe0);
  g.dout = to_device(dout, t);
  g.positions = static_cast<const int32_t*>(to_device(buckets.positions));
  g.starts = static_cast<const int32_t*>(to_device(buckets.starts));
  g.tokens = static_cast<const int32_t*>(to_device(buckets.tokens));
  g.buckets = static_cast<int>(buckets.tokens.size());
  g.batch = batch;
  g.seq = seq;
  g.cols = cols;
  g.vocab = vocab;
  k_->embedding_backward(g);
  expect_close(to_host(g.dwte, dwte.size()), dwte, 1e-5, "dwte");
  expect_close(to_host(g.dwpe, dwpe.size()), dwpe, 1e-5, "dwpe");
}

// The generated programs' embedding (one_hot(ids) @ table): this device
// holds rows [first, first + vocab) of the table; a token outside them, or
// a float label that is no class index, picks a zero row and adds nothing
// to the gradient. 300 tokens and 300 columns make two chunks of ids and
// two column blocks; 37 rows two row blocks of the gradient.
TEST_P(GpuKernelsByType, EmbeddingLookupAndGradFollowOneHot) {
  const DType t = GetParam();
  const int tokens = 300, cols = 300, vocab = 37, first = 40;
  std::mt19937 rng(23);
  std::vector<float> labels(tokens);
  for (auto& l : labels) l = static_cast<float>(30 + rng() % 55);  // some below first, some past the rows
  labels[3] = 40.5f;      // no class index
  labels[4] = -1.0f;
  labels[7] = first;      // the first and the last row
  labels[8] = first + vocab - 1;
  const auto table = random_values(vocab * cols, 24);
  auto row_of = [&](int n) {
    const float l = labels[n];
    const int k = static_cast<int>(l);
    return static_cast<float>(k) == l && k >= first && k < first + vocab ? k - first : -1;
  };
  EmbeddingLookup e;
  e.dtype = t;
  e.out = alloc(tokens * cols * rt::dtype_size(t));
  e.table = f32(table);
  e.float_ids = f32(labels);
  e.tokens = tokens;
  e.first = first;
  e.vocab = vocab;
  e.cols = cols;
  k_->embedding_lookup(e);
  std::vector<double> out(tokens * cols, 0.0);
  for (int n = 0; n < tokens; ++n)
    if (row_of(n) >= 0)
      for (int c = 0; c < cols; ++c) out[n * cols + c] = table[row_of(n) * cols + c];
  expect_close(to_host(e.out, out.size(), t), out, bound_for(t), "out");

  // The gradient, added to a prior one (a tied head's), rounded through
  // bf16 as a bf16 GEMM's result is.
  const auto dout = random_values(tokens * cols, 25);
  const auto ds = as_stored(dout, t);
  const auto prior = random_values(vocab * cols, 26);
  std::vector<double> sums(vocab * cols, 0.0);
  for (int n = 0; n < tokens; ++n)
    if (row_of(n) >= 0)
      for (int c = 0; c < cols; ++c) sums[row_of(n) * cols + c] += ds[n * cols + c];
  std::vector<double> dtable(vocab * cols);
  for (size_t i = 0; i < dtable.size(); ++i)
    dtable[i] = prior[i] + (t == DType::kBF16 ? rt::round_to_bf16(static_cast<float>(sums[i])) : sums[i]);
  EmbeddingGrad g;
  g.dtype = t;
  g.dtable = f32(prior);
  g.dout = to_device(dout, t);
  g.float_ids = e.float_ids;
  g.tokens = tokens;
  g.first = first;
  g.vocab = vocab;
  g.cols = cols;
  g.round_bf16 = t == DType::kBF16;
  g.accumulate = true;
  k_->embedding_grad(g);
  const std::vector<float> got = to_host(g.dtable, dtable.size());
  expect_close(got, dtable, t == DType::kBF16 ? bound_for(t, 8.0) : 1e-5, "dtable");
  // The same sums on every run: no atomics.
  k_->upload(g.dtable, prior.data(), prior.size() * 4);
  k_->embedding_grad(g);
  EXPECT_EQ(to_host(g.dtable, dtable.size()), got);
}

// Int32 ids, the whole table on the device (first 0): an id past the table
// picks zeros; without accumulate the gradient overwrites.
TEST_F(GpuKernels, EmbeddingLookupAndGradReadInt32Ids) {
  const int cols = 5, vocab = 4;
  const std::vector<int32_t> ids = {2, 0, 2, 9, -3, 3};
  const int tokens = static_cast<int>(ids.size());
  const auto table = random_values(vocab * cols, 27);
  EmbeddingLookup e;
  e.out = alloc(tokens * cols * 4);
  e.table = f32(table);
  e.ids = static_cast<const int32_t*>(to_device(ids));
  e.tokens = tokens;
  e.vocab = vocab;
  e.cols = cols;
  k_->embedding_lookup(e);
  const std::vector<float> out = to_host(e.out, tokens * cols);
  for (int n = 0; n < tokens; ++n)
    for (int c = 0; c < cols; ++c)
      EXPECT_EQ(out[n * cols + c], ids[n] >= 0 && ids[n] < vocab ? table[ids[n] * cols + c] : 0.0f)
          << "token " << n << " column " << c;
  std::vector<float> dout(tokens * cols);
  for (int i = 0; i < tokens * cols; ++i) dout[i] = static_cast<float>(i % 7 + 1);
  EmbeddingGrad g;
  g.dtable = f32(std::vector<float>(vocab * cols, 99.0f));  // overwritten
  g.dout = to_device(dout);
  g.ids = e.ids;
  g.tokens = tokens;
  g.vocab = vocab;
  g.cols = cols;
  k_->embedding_grad(g);
  const std::vector<float> d = to_host(g.dtable, vocab * cols);
  for (int v = 0; v < vocab; ++v)
    for (int c = 0; c < cols; ++c) {
      float s = 0.0f;
      for (int n = 0; n < tokens; ++n)
        if (ids[n] == v) s += dout[n * cols + c];
      EXPECT_EQ(d[v * cols + c], s) << "row " << v << " column " << c;
    }
}

TEST(EmbeddingBuckets, GroupPositionsByTokenInOrder) {
  const std::vector<int32_t> ids = {4, 1, 4, 0, 1, 4};
  const EmbeddingBuckets b = embedding_buckets(ids.data(), 6);
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{0, 1, 4}));
  EXPECT_EQ(b.starts, (std::vector<int32_t>{0, 1, 3, 6}));
  EXPECT_EQ(b.positions, (std::vector<int32_t>{3, 1, 4, 0, 2, 5}));
}

// --------------------------------------------------------------------------
// Global norm and clipping

TEST_F(GpuKernels, GlobalNormAndClipFactorMatchTheReference) {
  const std::vector<int64_t> sizes = {3, kTensorChunk + 5, 1000};
  std::vector<NormTensor> tensors;
  double sq = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto x = random_values(sizes[i], 90 + i);
    for (float v : x) sq += double{v} * v;
    tensors.push_back({f32(x), sizes[i]});
  }
  const auto chunks = tensor_chunks(sizes);
  auto* dt = static_cast<NormTensor*>(alloc(tensors.size() * sizeof(NormTensor)));
  k_->upload(dt, tensors.data(), tensors.size() * sizeof(NormTensor));
  auto* dc = static_cast<TensorChunk*>(alloc(chunks.size() * sizeof(TensorChunk)));
  k_->upload(dc, chunks.data(), chunks.size() * sizeof(TensorChunk));
  for (float max_norm : {1.0f, 1e6f}) {
    SCOPED_TRACE("max_norm " + std::to_string(max_norm));
    GlobalNorm a;
    a.tensors = dt;
    a.chunks = dc;
    a.num_chunks = static_cast<int>(chunks.size());
    a.partial = static_cast<float*>(alloc(chunks.size() * 4));
    a.norm = static_cast<float*>(alloc(4));
    a.clip_factor = static_cast<float*>(alloc(4));
    a.max_norm = max_norm;
    k_->global_norm(a);
    const double norm = std::sqrt(sq);
    expect_close(to_host(a.norm, 1), {norm}, 1e-5, "norm");
    expect_close(to_host(a.clip_factor, 1), {std::min(1.0, max_norm / norm)}, 1e-5, "clip factor");
  }
}

// --------------------------------------------------------------------------
// Cross-entropy

TEST_P(GpuKernelsByType, CrossEntropyGivesLossAndGradientInPlace) {
  const DType t = GetParam();
  // 1531: one logit at a time, 3 passes of 512 threads, the last partial;
  // 4104: 16 bytes at a time (rows start 16-byte aligned), 513 chunks of 8
  // bf16 (1026 of 4 f32), so again a partial last pass.
  for (const int vocab : {1531, 4104}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    const int rows = 6;
    auto logits = random_values(rows * vocab, 11, -4.0f, 4.0f);
    const std::vector<int32_t> targets = {0, vocab - 1, 7, 512, 999, 3};
    const float dloss = 1.0f / rows;
    const auto ls = as_stored(logits, t);
    std::vector<double> loss(rows), grad(ls.size());
    for (int r = 0; r < rows; ++r) {
      double m = -INFINITY, s = 0;
      for (int c = 0; c < vocab; ++c) m = std::max(m, ls[r * vocab + c]);
      for (int c = 0; c < vocab; ++c) s += std::exp(ls[r * vocab + c] - m);
      const double lse = m + std::log(s);
      loss[r] = lse - ls[r * vocab + targets[r]];
      for (int c = 0; c < vocab; ++c)
        grad[r * vocab + c] = (std::exp(ls[r * vocab + c] - lse) - (c == targets[r])) * dloss;
    }
    CrossEntropy a;
    a.dtype = t;
    a.logits = to_device(logits, t);
    a.dlogits = const_cast<void*>(a.logits);  // in place
    a.targets = static_cast<const int32_t*>(to_device(targets));
    a.loss = static_cast<float*>(alloc(rows * 4));
    a.rows = rows;
    a.vocab = vocab;
    a.dloss = dloss;
    k_->cross_entropy(a);
    expect_close(to_host(a.loss, rows), loss, 1e-4, "loss");
    expect_close(to_host(a.dlogits, grad.size(), t), grad, bound_for(t), "dlogits");
  }
}

TEST_F(GpuKernels, CrossEntropyOfATargetOutsideTheVocabularyIsNaN) {
  const int vocab = 40;
  auto logits = random_values(2 * vocab, 12);
  CrossEntropy a;
  a.logits = to_device(logits);
  a.targets = static_cast<const int32_t*>(to_device(std::vector<int32_t>{vocab, 3}));
  a.loss = static_cast<float*>(alloc(8));
  a.rows = 2;
  a.vocab = vocab;
  k_->cross_entropy(a);  // forward only: dlogits is null
  const auto loss = to_host(a.loss, 2);
  EXPECT_TRUE(std::isnan(loss[0])) << loss[0];
  EXPECT_TRUE(std::isfinite(loss[1])) << loss[1];
  EXPECT_EQ(to_host(a.logits, 2 * vocab), logits) << "forward only must not touch the logits";
}

// The DSL's labels: floats, one_hot's meaning (a label that is no class
// index picks no logit), and each row's own dloss, as generated programs
// pass them.
TEST_F(GpuKernels, CrossEntropyOfFloatLabelsFollowsOneHot) {
  const int rows = 4, vocab = 50;
  auto logits = random_values(rows * vocab, 13, -3.0f, 3.0f);
  const std::vector<float> labels = {7, 2.5f, 49, 50};  // 2.5 and 50 are no class
  const std::vector<float> dloss = {0.25f, -0.5f, 1.0f, 2.0f};
  std::vector<double> loss(rows), grad(rows * vocab);
  for (int r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int c = 0; c < vocab; ++c) m = std::max<double>(m, logits[r * vocab + c]);
    for (int c = 0; c < vocab; ++c) s += std::exp(logits[r * vocab + c] - m);
    const double lse = m + std::log(s);
    const bool picks = r == 0 || r == 2;
    loss[r] = lse - (picks ? logits[r * vocab + static_cast<int>(labels[r])] : 0.0);
    for (int c = 0; c < vocab; ++c)
      grad[r * vocab + c] =
          (std::exp(logits[r * vocab + c] - lse) - (picks && c == static_cast<int>(labels[r]))) * dloss[r];
  }
  CrossEntropy a;
  a.logits = to_device(logits);
  a.dlogits = alloc(rows * vocab * 4);
  a.float_targets = static_cast<const float*>(to_device(labels));
  a.dloss_rows = static_cast<const float*>(to_device(dloss));
  a.loss = static_cast<float*>(alloc(rows * 4));
  a.rows = rows;
  a.vocab = vocab;
  k_->cross_entropy(a);
  expect_close(to_host(a.loss, rows), loss, 1e-5, "loss");
  expect_close(to_host(a.dlogits, grad.size()), grad, 1e-5, "dlogits");
}

// --------------------------------------------------------------------------
// AdamW

TEST_F(GpuKernels, AdamWUpdatesManyTensorsInOneLaunchAsOptax) {
  // Sizes: one element, two chunks with a partial second, and a small one.
  const std::vector<int64_t> sizes = {1, kTensorChunk + 1001, 300};
  const std::vector<float> decay = {0.1f, 0.0f, 0.05f};
  const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
  std::vector<AdamWTensor> tensors;
  std::vector<std::vector<float>> p, g, m, v;
  for (size_t i = 0; i < sizes.size(); ++i) {
    p.push_back(random_values(sizes[i], 20 + i));
    g.push_back(random_values(sizes[i], 30 + i, -0.01f, 0.01f));
    m.push_back(random_values(sizes[i], 40 + i, -0.001f, 0.001f));
    v.push_back(random_values(sizes[i], 50 + i, 0.0f, 1e-5f));
    AdamWTensor t{f32(p[i]), f32(g[i]), f32(m[i]), f32(v[i]), nullptr, sizes[i], decay[i]};
    if (i == 2) t.param_bf16 = alloc(sizes[i] * 2);
    tensors.push_back(t);
  }
  const auto chunks = tensor_chunks(sizes);
  ASSERT_EQ(chunks.size(), 4u);
  auto* dev_tensors = static_cast<AdamWTensor*>(alloc(tensors.size() * sizeof(AdamWTensor)));
  k_->upload(dev_tensors, tensors.data(), tensors.size() * sizeof(AdamWTensor));
  auto* dev_chunks = static_cast<TensorChunk*>(alloc(chunks.size() * sizeof(TensorChunk)));
  k_->upload(dev_chunks, chunks.data(), chunks.size() * sizeof(TensorChunk));
  const float lr = 3e-3f, count = 4.0f, clip = 0.5f;
  AdamWHyper h;
  h.b1 = b1;
  h.b2 = b2;
  h.eps = eps;
  h.lr = f32({lr});
  h.count = f32({count});
  h.grad_scale = f32({clip});
  k_->adamw(dev_tensors, dev_chunks, static_cast<int>(chunks.size()), h);
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE("tensor " + std::to_string(i));
    std::vector<double> wp(sizes[i]), wm(sizes[i]), wv(sizes[i]);
    const double bc1 = 1 - std::pow(double{b1}, count), bc2 = 1 - std::pow(double{b2}, count);
    for (int64_t j = 0; j < sizes[i]; ++j) {
      const double gr = double{g[i][j]} * clip;
      wm[j] = b1 * double{m[i][j]} + (1 - double{b1}) * gr;
      wv[j] = b2 * double{v[i][j]} + (1 - double{b2}) * gr * gr;
      const double upd = wm[j] / bc1 / (std::sqrt(wv[j] / bc2) + eps) + decay[i] * double{p[i][j]};
      wp[j] = p[i][j] - lr * upd;
    }
    expect_close(to_host(tensors[i].m, sizes[i]), wm, 1e-5, "m");
    expect_close(to_host(tensors[i].v, sizes[i]), wv, 1e-5, "v");
    expect_close(to_host(tensors[i].param, sizes[i]), wp, 1e-5, "param");
    if (tensors[i].param_bf16)
      expect_close(to_host(tensors[i].param_bf16, sizes[i], DType::kBF16), wp, std::ldexp(1.0, -8),
                   "param_bf16");
  }
}

// --------------------------------------------------------------------------
// Attention

struct AttentionRef {
  std::vector<double> o, lse, dq, dk, dv;
};

// q, k, v, dout: [batch, seq, heads, D] contiguous.
AttentionRef attention_ref(const std::vector<double>& q, const std::vector<double>& k,
                           const std::vector<double>& v, const std::vector<double>& dout, int B,
                           int T, int H, int D, double scale, bool causal) {
  AttentionRef r{std::vector<double>(q.size()), std::vector<double>(B * H * T),
                 std::vector<double>(q.size()), std::vector<double>(q.size()),
                 std::vector<double>(q.size())};
  auto at = [&](int b, int t, int h) { return ((static_cast<size_t>(b) * T + t) * H + h) * D; };
  std::vector<double> p(T), dp(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        const int n = causal ? i + 1 : T;
        double m = -INFINITY;
        for (int j = 0; j < n; ++j) {
          double s = 0;
          for (int d = 0; d < D; ++d) s += q[at(b, i, h) + d] * k[at(b, j, h) + d];
          p[j] = s * scale;
          m = std::max(m, p[j]);
        }
        double sum = 0;
        for (int j = 0; j < n; ++j) sum += (p[j] = std::exp(p[j] - m));
        for (int j = 0; j < n; ++j) p[j] /= sum;
        r.lse[(b * H + h) * T + i] = m + std::log(sum);
        double delta = 0;
        for (int d = 0; d < D; ++d) {
          double o = 0;
          for (int j = 0; j < n; ++j) o += p[j] * v[at(b, j, h) + d];
          r.o[at(b, i, h) + d] = o;
          delta += o * dout[at(b, i, h) + d];
        }
        for (int j = 0; j < n; ++j) {
          double g = 0;
          for (int d = 0; d < D; ++d) g += dout[at(b, i, h) + d] * v[at(b, j, h) + d];
          const double ds = p[j] * (g - delta);
          for (int d = 0; d < D; ++d) {
            r.dv[at(b, j, h) + d] += p[j] * dout[at(b, i, h) + d];
            r.dq[at(b, i, h) + d] += ds * scale * k[at(b, j, h) + d];
            r.dk[at(b, j, h) + d] += ds * scale * q[at(b, i, h) + d];
          }
        }
      }
  return r;
}

struct AttentionCase {
  DType dtype;
  int batch, seq, heads, head_dim;
  bool causal;
  bool packed;  // q, k, v read from one [batch, seq, 3, heads, D] tensor
  bool tensor_cores = true;  // bf16 only: false runs the scalar kernels
  // With packed: [batch, seq, heads, 3, D] instead, the DSL's
  // CausalSelfAttention layout (each head's q, k, v side by side).
  bool head_major = false;
  // Without packed: q, k and v start one element into their buffers, so the
  // tensor-core kernels' tiles load element by element, not 16 bytes at once.
  bool unaligned = false;
  // bf16 on the tensor cores: query rows per warp of the forward and dq
  // kernels (KernelSet::set_attention_rows_per_warp).
  int rows_per_warp = 16;
};

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << rt::dtype_name(c.dtype) << " batch " << c.batch << " seq " << c.seq << " heads "
      << c.heads << " head_dim " << c.head_dim << (c.causal ? " causal" : " full")
      << (c.packed ? (c.head_major ? " packed head-major" : " packed") : "")
      << (c.tensor_cores ? "" : " scalar") << (c.unaligned ? " unaligned" : "")
      << (c.rows_per_warp != 16 ? " " + std::to_string(c.rows_per_warp) + " rows a warp" : "");
}

class GpuAttention : public GpuKernels, public ::testing::WithParamInterface<AttentionCase> {};

std::string attention_name(const ::testing::TestParamInfo<AttentionCase>& info) {
  const auto& c = info.param;
  return std::string(rt::dtype_name(c.dtype)) + "_b" + std::to_string(c.batch) + "_t" +
         std::to_string(c.seq) + "_h" + std::to_string(c.heads) + "_d" +
         std::to_string(c.head_dim) + (c.causal ? "_causal" : "_full") +
         (c.packed ? (c.head_major ? "_packed_head_major" : "_packed") : "") +
         (c.dtype == DType::kBF16 && !c.tensor_cores ? "_scalar" : "") + (c.unaligned ? "_unaligned" : "") +
         (c.rows_per_warp != 16 ? "_rows" + std::to_string(c.rows_per_warp) : "");
}

TEST_P(GpuAttention, ForwardAndBackwardMatchTheReference) {
  const auto c = GetParam();
  const int B = c.batch, T = c.seq, H = c.heads, D = c.head_dim;
  const size_t n = static_cast<size_t>(B) * T * H * D;
  auto q = random_values(n, 60, -1.5f, 1.5f), k = random_values(n, 61, -1.5f, 1.5f);
  auto v = random_values(n, 62), dout = random_values(n, 63);
  const double scale = 1.0 / std::sqrt(double(D));
  const auto ref = attention_ref(as_stored(q, c.dtype), as_stored(k, c.dtype),
                                 as_stored(v, c.dtype), as_stored(dout, c.dtype), B, T, H, D,
                                 scale, c.causal);
  const size_t es = rt::dtype_size(c.dtype);
  const AttentionStrides plain{int64_t{T} * H * D, int64_t{H} * D, D};
  Attention a;
  a.dtype = c.dtype;
  if (c.packed) {
    std::vector<float> qkv(3 * n);
    // Where element (row, head, part) starts, in D-element units.
    auto at = [&](size_t row, int head, int part) {
      return c.head_major ? (row * H + head) * 3 + part : (row * 3 + part) * H + head;
    };
    for (size_t row = 0; row < static_cast<size_t>(B) * T; ++row)
      for (int head = 0; head < H; ++head)
        for (int part = 0; part < 3; ++part) {
          const auto& src = part == 0 ? q : part == 1 ? k : v;
          std::copy_n(src.begin() + (row * H + head) * D, D, qkv.begin() + at(row, head, part) * D);
        }
    auto* base = static_cast<char*>(to_device(qkv, c.dtype));
    const int64_t part_stride = c.head_major ? D : int64_t{H} * D;
    a.q = base;
    a.k = base + part_stride * es;
    a.v = base + 2 * part_stride * es;
    a.sq = a.sk = a.sv = {int64_t{T} * 3 * H * D, int64_t{3} * H * D,
                          c.head_major ? int64_t{3} * D : int64_t{D}};
  } else {
    // One element in, where unaligned (its value never read).
    auto placed = [&](const std::vector<float>& x) -> const void* {
      if (!c.unaligned) return to_device(x, c.dtype);
      std::vector<float> shifted(1, 0.0f);
      shifted.insert(shifted.end(), x.begin(), x.end());
      return static_cast<const char*>(to_device(shifted, c.dtype)) + es;
    };
    a.q = placed(q);
    a.k = placed(k);
    a.v = placed(v);
    a.sq = a.sk = a.sv = plain;
  }
  a.o = alloc(n * es);
  a.so = plain;
  a.lse = static_cast<float*>(alloc(B * H * T * 4));
  a.batch = B;
  a.heads = H;
  a.seq = T;
  a.head_dim = D;
  a.scale = static_cast<float>(scale);
  a.causal = c.causal;
  k_->set_tensor_cores(c.tensor_cores);
  k_->set_attention_rows_per_warp(c.rows_per_warp);
  k_->attention_forward(a);
  expect_close(to_host(a.o, n, c.dtype), ref.o, bound_for(c.dtype), "o");
  expect_close(to_host(a.lse, ref.lse.size()), ref.lse, bound_for(c.dtype), "lse");

  AttentionBackward g;
  g.dtype = c.dtype;
  g.q = a.q;
  g.k = a.k;
  g.v = a.v;
  g.o = a.o;
  g.dout = to_device(dout, c.dtype);
  g.lse = a.lse;
  g.delta = static_cast<float*>(alloc(B * H * T * 4));
  g.dq = alloc(n * es);
  g.dk = alloc(n * es);
  g.dv = alloc(n * es);
  g.sq = a.sq;
  g.sk = a.sk;
  g.sv = a.sv;
  g.so = g.sdo = g.sdq = g.sdk = g.sdv = plain;
  g.batch = B;
  g.heads = H;
  g.seq = T;
  g.head_dim = D;
  g.scale = a.scale;
  g.causal = c.causal;
  k_->attention_backward(g);
  k_->set_tensor_cores(true);
  k_->set_attention_rows_per_warp(16);
  const double gb = bound_for(c.dtype, 2.0);
  expect_close(to_host(g.dq, n, c.dtype), ref.dq, gb, "dq");
  expect_close(to_host(g.dk, n, c.dtype), ref.dk, gb, "dk");
  expect_close(to_host(g.dv, n, c.dtype), ref.dv, gb, "dv");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GpuAttention,
    ::testing::Values(AttentionCase{DType::kF32, 2, 70, 3, 16, true, false},
                      AttentionCase{DType::kF32, 1, 45, 2, 32, false, false},
                      AttentionCase{DType::kF32, 1, 130, 2, 64, true, true},
                      AttentionCase{DType::kBF16, 2, 70, 3, 16, true, true},
                      AttentionCase{DType::kBF16, 2, 70, 3, 16, true, true, false},
                      AttentionCase{DType::kBF16, 1, 97, 1, 64, true, false},
                      AttentionCase{DType::kBF16, 1, 97, 1, 64, true, false, false},
                      AttentionCase{DType::kBF16, 1, 97, 1, 64, true, false, true, false, true},
                      AttentionCase{DType::kBF16, 2, 150, 2, 32, false, false},
                      AttentionCase{DType::kBF16, 1, 200, 2, 64, true, true},
                      AttentionCase{DType::kBF16, 2, 80, 3, 32, true, true, true, true},
                      // Five blocks of 64 query rows (the causal grid runs
                      // them last first), dq walking ten 32-key tiles.
                      AttentionCase{DType::kBF16, 1, 300, 1, 64, true, true, true, true},
                      // 32 rows a warp (blocks of 128 rows).
                      AttentionCase{DType::kBF16, 1, 300, 1, 64, true, true, true, true, false, 32},
                      AttentionCase{DType::kBF16, 1, 200, 2, 64, true, true, true, false, false, 32},
                      AttentionCase{DType::kBF16, 2, 150, 2, 32, false, false, true, false, false, 32},
                      AttentionCase{DType::kBF16, 1, 97, 1, 64, true, false, true, false, true, 32},
                      AttentionCase{DType::kF32, 1, 33, 2, 16, true, true, true, true},
                      // Head size 8 (the sample GPT's): scalar kernels in bf16 too.
                      AttentionCase{DType::kF32, 2, 40, 2, 8, true, true, true, true},
                      AttentionCase{DType::kBF16, 1, 70, 3, 8, true, true, true, true}),
    attention_name);

TEST_F(GpuKernels, AttentionRowsPerWarpAreSixteenOrThirtyTwo) {
  try {
    k_->set_attention_rows_per_warp(64);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "set_attention_rows_per_warp: 64 rows; the tensor-core attention kernels are built for 16 and 32");
  }
  k_->set_attention_rows_per_warp(32);
  k_->set_attention_rows_per_warp(16);  // the default, for the tests after this one
}

TEST_F(GpuKernels, AttentionRefusesAHeadSizeWithoutAKernel) {
  Attention a;
  a.batch = a.heads = a.seq = 1;
  a.head_dim = 48;
  try {
    k_->attention_forward(a);
    FAIL() << "head_dim 48 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "attention_forward: head_dim 48 has no kernel; the attention kernels are built "
                 "for 8, 16, 32 and 64");
  }
  EXPECT_FALSE(attention_supports_head_dim(48));
  EXPECT_TRUE(attention_supports_head_dim(64));
}

// --------------------------------------------------------------------------
// GEMM (cuBLASLt on the device; the simulator's reference loop otherwise)

struct GemmCase {
  DType ab, c;
  bool trans_a, trans_b, bias, gelu, beta;
  bool gelu_backward = false;  // then gelu and bias are false
};

void PrintTo(const GemmCase& c, std::ostream* os) {
  *os << rt::dtype_name(c.ab) << " -> " << rt::dtype_name(c.c) << (c.trans_a ? " A^T" : " A")
      << (c.trans_b ? " B^T" : " B") << (c.bias ? " +bias" : "") << (c.gelu ? " gelu" : "")
      << (c.beta ? " beta" : "") << (c.gelu_backward ? " dgelu" : "");
}

class GpuGemm : public GpuKernels, public ::testing::WithParamInterface<GemmCase> {};

std::string gemm_name(const ::testing::TestParamInfo<GemmCase>& info) {
  const auto& c = info.param;
  return std::string(rt::dtype_name(c.ab)) + "_to_" + std::string(rt::dtype_name(c.c)) +
         (c.trans_a ? "_At" : "_A") + (c.trans_b ? "Bt" : "B") + (c.bias ? "_bias" : "") +
         (c.gelu ? "_gelu" : "") + (c.beta ? "_beta" : "") +
         (c.gelu_backward ? "_dgelu" : "");
}

double gelu_ref(double x) {
  return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

double gelu_derivative_ref(double x) {
  const double k = 0.7978845608028654, u = k * (x + 0.044715 * x * x * x), t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

TEST_P(GpuGemm, MatchesTheReference) {
  const auto c = GetParam();
  const int m = 40, n = 24, k = 72;  // multiples of 8: cuBLASLt's bf16 alignment
  auto A = random_values(m * k, 70), Bm = random_values(k * n, 71);
  auto C0 = random_values(m * n, 72), bias = random_values(n, 73);
  // Stored layouts: A [m, k] or [k, m]; B [k, n] or [n, k].
  std::vector<float> As(m * k), Bs(k * n);
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p) As[c.trans_a ? p * m + i : i * k + p] = A[i * k + p];
  for (int p = 0; p < k; ++p)
    for (int j = 0; j < n; ++j) Bs[c.trans_b ? j * k + p : p * n + j] = Bm[p * n + j];
  const auto a = as_stored(A, c.ab), b = as_stored(Bm, c.ab), c0 = as_stored(C0, c.c),
             bs = as_stored(bias, c.c);
  const float alpha = 0.75f, beta = c.beta ? 0.5f : 0.0f;
  auto saved = random_values(m * n, 74, -3.0f, 3.0f);  // gelu's argument, for the backward
  const auto ss = as_stored(saved, c.c);
  std::vector<double> want(m * n), pre(m * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p) s += a[i * k + p] * b[p * n + j];
      double x = alpha * s + beta * c0[i * n + j] + (c.bias ? bs[j] : 0.0);
      pre[i * n + j] = x;
      want[i * n + j] = c.gelu ? gelu_ref(x)
                        : c.gelu_backward ? x * gelu_derivative_ref(ss[i * n + j])
                                          : x;
    }
  Gemm g;
  g.trans_a = c.trans_a;
  g.trans_b = c.trans_b;
  g.m = m;
  g.n = n;
  g.k = k;
  g.ab_dtype = c.ab;
  g.a = to_device(As, c.ab);
  g.lda = c.trans_a ? m : k;
  g.b = to_device(Bs, c.ab);
  g.ldb = c.trans_b ? k : n;
  g.c_dtype = c.c;
  g.c = to_device(C0, c.c);
  g.ldc = n;
  if (c.bias) g.bias = to_device(bias, c.c);
  if (c.gelu) {
    g.epilogue = Gemm::Epilogue::kGelu;
    g.pre_gelu = alloc(m * n * rt::dtype_size(c.c));
  }
  if (c.gelu_backward) {
    g.epilogue = Gemm::Epilogue::kGeluBackward;
    g.pre_gelu = to_device(saved, c.c);
  }
  g.alpha = alpha;
  g.beta = beta;
  k_->gemm(g);
  // bf16 products are exact in f32; the sum is f32 (on the device maybe in
  // another order); bf16 outputs add one rounding.
  const double bound = c.c == DType::kBF16 ? std::ldexp(1.0, -7) : 1e-4;
  expect_close(to_host(g.c, m * n, c.c), want, bound, "c");
  if (c.gelu) expect_close(to_host(g.pre_gelu, m * n, c.c), pre, bound, "pre_gelu");
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, GpuGemm,
    ::testing::Values(GemmCase{DType::kF32, DType::kF32, false, false, false, false, false},
                      GemmCase{DType::kF32, DType::kF32, true, true, true, false, true},
                      GemmCase{DType::kBF16, DType::kF32, false, true, false, false, true},
                      GemmCase{DType::kBF16, DType::kBF16, false, false, true, false, false},
                      GemmCase{DType::kBF16, DType::kBF16, false, true, true, true, false},
                      GemmCase{DType::kBF16, DType::kBF16, true, false, false, true, false},
                      GemmCase{DType::kBF16, DType::kF32, true, false, true, true, false},
                      GemmCase{DType::kBF16, DType::kBF16, false, false, false, false, false, true},
                      GemmCase{DType::kF32, DType::kF32, false, true, false, false, true, true}),
    gemm_name);

TEST_F(GpuKernels, TheGeluBackwardEpilogueNeedsTheSavedArgument) {
  Gemm g;
  g.m = g.n = g.k = 8;
  g.epilogue = Gemm::Epilogue::kGeluBackward;
  try {
    k_->gemm(g);
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "gemm: the GELU backward epilogue reads pre_gelu and takes no bias");
  }
}

TEST_P(GpuKernelsByType, BiasGradIsTheColumnSum) {
  const DType t = GetParam();
  const int rows = 2100, cols = 70;  // 9 slices of 256 rows, the last partial; 3 tiles of 32 columns
  auto dout = random_values(rows * cols, 75);
  const auto ds = as_stored(dout, t);
  auto db0 = random_values(cols, 76);
  std::vector<double> want(db0.begin(), db0.end());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) want[c] += ds[r * cols + c];
  BiasGrad a;
  a.dtype = t;
  a.db = f32(db0);
  a.scratch = static_cast<float*>(alloc(bias_grad_scratch(rows, cols) * 4));
  a.dout = to_device(dout, t);
  a.rows = rows;
  a.cols = cols;
  a.accumulate = true;
  k_->bias_grad(a);
  expect_close(to_host(a.db, cols), want, 1e-5, "db");
}

// --------------------------------------------------------------------------
// The tensor-core fragment layout

TEST_F(GpuKernels, TensorCoreFragmentsFollowThePtxLayout) {
  auto a = random_values(16 * 16, 80), b = random_values(16 * 8, 81);
  float* d = static_cast<float*>(alloc(16 * 8 * 4));
  k_->mma_16x8x16_check(d, f32(a), f32(b));
  const auto as = as_stored(a, DType::kBF16), bs = as_stored(b, DType::kBF16);
  std::vector<double> want(16 * 8);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j)
      for (int p = 0; p < 16; ++p) want[i * 8 + j] += as[i * 16 + p] * bs[p * 8 + j];
  expect_close(to_host(d, 16 * 8), want, 1e-6, "d");
}

INSTANTIATE_TEST_SUITE_P(Types, GpuKernelsByType, ::testing::Values(DType::kF32, DType::kBF16),
                         type_name);

}  // namespace
}  // namespace sharc::gpu
