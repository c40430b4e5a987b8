// Kernels against naive loops. gemm compares with a double-precision triple
// loop at a relative tolerance of 1e-5 (K <= 70 float products of O(1) values
// stay far inside that); the data-movement kernels and reductions run on
// integer-valued floats and must match exactly.
#include "runtime/kernels.h"
#include "runtime/copy_bytes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "tests/runtime/gemm_reference.h"

namespace sharc::rt {
namespace {

std::vector<float> randn(size_t n, int seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

std::vector<float> ints(size_t n, int seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(-50, 50);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(dist(gen));
  return v;
}

std::vector<int64_t> strides_of(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

// Row-major multi-index of flat position i.
std::vector<int64_t> unravel(int64_t i, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

TEST(Kernels, GemmAllTransposesWithBatch) {
  const int64_t batch = 3, M = 5, N = 7, K = 70;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::vector<float> A = randn(batch * M * K, 1), B = randn(batch * K * N, 2);
      std::vector<float> C(batch * M * N, 99.0f);  // beta = 0 must ignore this
      gemm(batch, M, N, K, A.data(), ta, B.data(), tb, C.data());
      const double max_rel = testing::gemm_max_relative_error(batch, M, N, K, A, ta, B, tb, C);
      EXPECT_LT(max_rel, 1e-5) << "trans_a " << ta << " trans_b " << tb;
    }
  }
}

TEST(Kernels, GemmBetaAccumulatesAndEmptyKZeroes) {
  const std::vector<float> A = {1, 2, 3, 4}, B = {1, 0, 0, 1};  // B = identity
  std::vector<float> C = {10, 10, 10, 10};
  gemm(1, 2, 2, 2, A.data(), false, B.data(), false, C.data(), 1.0f);
  EXPECT_EQ(C, (std::vector<float>{11, 12, 13, 14}));
  gemm(1, 2, 2, 0, nullptr, false, nullptr, false, C.data());
  EXPECT_EQ(C, std::vector<float>(4, 0.0f));
}

TEST(Kernels, GemmFromManyDeviceThreadsAtOnce) {
  // ThreadWorld devices call gemm concurrently; OpenBLAS must give each the
  // same answer it gives alone.
  const int64_t M = 64, N = 48, K = 80;
  const std::vector<float> A = randn(M * K, 7), B = randn(K * N, 8);
  std::vector<float> want(M * N);
  gemm(1, M, N, K, A.data(), false, B.data(), false, want.data());
  std::vector<std::vector<float>> got(8, std::vector<float>(M * N));
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        gemm(1, M, N, K, A.data(), false, B.data(), false, got[t].data());
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(got[t], want) << "thread " << t;
}

void check_transpose(const std::vector<int64_t>& shape, const std::vector<int>& perm) {
  const int64_t n = num_elements(shape);
  const std::vector<float> in = ints(n, 3);
  std::vector<int64_t> out_shape(shape.size());
  for (size_t i = 0; i < perm.size(); ++i) out_shape[i] = shape[perm[i]];
  std::vector<float> out(n, -1000.0f);
  transpose(in.data(), shape, perm, out.data());
  const std::vector<int64_t> is = strides_of(shape);
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int64_t> o = unravel(i, out_shape);
    int64_t src = 0;
    for (size_t d = 0; d < perm.size(); ++d) src += o[d] * is[perm[d]];
    ASSERT_EQ(out[i], in[src]) << "element " << i;
  }
}

TEST(Kernels, TransposeEveryPermutationOf3DAnd4D) {
  std::vector<int> p3 = {0, 1, 2};
  do {
    SCOPED_TRACE(::testing::Message() << "perm " << p3[0] << p3[1] << p3[2]);
    check_transpose({3, 4, 5}, p3);
    check_transpose({2, 1, 7}, p3);    // size-1 dim
    check_transpose({3, 40, 50}, p3);  // larger than a 32x32 tile
  } while (std::next_permutation(p3.begin(), p3.end()));
  std::vector<int> p4 = {0, 1, 2, 3};
  do {
    SCOPED_TRACE(::testing::Message() << "perm " << p4[0] << p4[1] << p4[2] << p4[3]);
    check_transpose({2, 3, 4, 5}, p4);
    check_transpose({3, 1, 33, 35}, p4);
  } while (std::next_permutation(p4.begin(), p4.end()));
}

TEST(Kernels, TransposeRejectsNonPermutation) {
  float x[6] = {};
  float y[6];
  EXPECT_THROW(transpose(x, {2, 3}, {0, 0}, y), std::invalid_argument);
  EXPECT_THROW(transpose(x, {2, 3}, {1}, y), std::invalid_argument);
}

void check_broadcast(const std::vector<int64_t>& in_shape, const std::vector<int64_t>& out_shape) {
  const std::vector<float> in = ints(num_elements(in_shape), 4);
  const int64_t n = num_elements(out_shape);
  std::vector<float> out(n, -1000.0f);
  broadcast(in.data(), in_shape, out_shape, out.data());
  const std::vector<int64_t> is = strides_of(in_shape);
  const size_t lead = out_shape.size() - in_shape.size();
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int64_t> o = unravel(i, out_shape);
    int64_t src = 0;
    for (size_t d = 0; d < in_shape.size(); ++d) {
      src += (in_shape[d] == 1 ? 0 : o[lead + d]) * is[d];
    }
    ASSERT_EQ(out[i], in[src]) << "element " << i;
  }
}

TEST(Kernels, BroadcastNumpyRules) {
  check_broadcast({3, 1}, {2, 3, 4});
  check_broadcast({4}, {3, 4});
  check_broadcast({}, {2, 2});
  check_broadcast({1}, {5});
  check_broadcast({2, 1, 3}, {2, 4, 3});
  check_broadcast({1, 5, 1}, {3, 5, 6});
  check_broadcast({2, 3}, {2, 3});
  float x[3] = {};
  float y[12];
  EXPECT_THROW(broadcast(x, {3}, {4, 2}, y), std::invalid_argument);
  EXPECT_THROW(broadcast(x, {3, 1}, {3}, y), std::invalid_argument);
}

void check_reduce(const std::vector<int64_t>& shape, const std::vector<int>& axes, ReduceOp op) {
  const int64_t n = num_elements(shape);
  const std::vector<float> in = ints(n, 5);
  std::vector<bool> red(shape.size(), false);
  for (int a : axes) red[a] = true;
  std::vector<int64_t> out_shape;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!red[d]) out_shape.push_back(shape[d]);
  }
  const float init = op == ReduceOp::kSum ? 0.0f : -std::numeric_limits<float>::infinity();
  std::vector<float> want(num_elements(out_shape), init);
  const std::vector<int64_t> os = strides_of(out_shape);
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int64_t> idx = unravel(i, shape);
    int64_t o = 0, k = 0;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (!red[d]) o += idx[d] * os[k++];
    }
    want[o] = op == ReduceOp::kSum ? want[o] + in[i] : std::max(want[o], in[i]);
  }
  std::vector<float> out(want.size(), 12345.0f);
  reduce(in.data(), shape, axes, op, out.data());
  EXPECT_EQ(out, want);
}

TEST(Kernels, ReduceSumAndMaxOverEveryAxisSubset) {
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{3, 4, 5}, {2, 3, 4, 5}, {4, 1, 37}}) {
    const int r = static_cast<int>(shape.size());
    for (int mask = 0; mask < (1 << r); ++mask) {
      std::vector<int> axes;
      for (int d = r - 1; d >= 0; --d) {  // descending: order must not matter
        if (mask & (1 << d)) axes.push_back(d);
      }
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        SCOPED_TRACE(::testing::Message() << "rank " << r << " mask " << mask
                                          << (op == ReduceOp::kSum ? " sum" : " max"));
        check_reduce(shape, axes, op);
      }
    }
  }
}

TEST(Kernels, ReduceEdgeCases) {
  float x = 5.0f, y = 0.0f;
  reduce(&x, {}, {}, ReduceOp::kSum, &y);  // scalar
  EXPECT_EQ(y, 5.0f);
  std::vector<float> z(3, 0.0f);
  reduce<float>(nullptr, {0, 3}, {0}, ReduceOp::kMax, z.data());  // max over nothing
  EXPECT_EQ(z, std::vector<float>(3, -std::numeric_limits<float>::infinity()));
  EXPECT_THROW(reduce(&x, {1}, {1}, ReduceOp::kSum, &y), std::invalid_argument);
  EXPECT_THROW(reduce(&x, {1, 1}, {0, 0}, ReduceOp::kSum, &y), std::invalid_argument);
}

// copy_bytes takes its own path at the skews where memcpy is slow on AMD
// Zen (1 to 31 bytes, the destination past the source) and memcpy's at the
// rest: every byte arrives, at every skew, in copies with and without a
// tail of under 64 bytes, and nothing past the end is touched.
TEST(Kernels, CopyBytesAtEverySkew) {
  std::vector<unsigned char> src(8192 + 64), dst(8192 + 192);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 3);
  for (size_t bytes : {0, 1, 63, 1024, 1100, 4096, 8191}) {
    for (size_t at = 0; at < 128; ++at) {
      std::fill(dst.begin(), dst.end(), 0xAB);
      sharc::rt::copy_bytes(dst.data() + at, src.data() + 5, bytes);
      ASSERT_TRUE(std::equal(src.begin() + 5, src.begin() + 5 + static_cast<ptrdiff_t>(bytes), dst.begin() + at))
          << bytes << " bytes at " << at;
      ASSERT_TRUE(std::all_of(dst.begin(), dst.begin() + at, [](unsigned char c) { return c == 0xAB; }));
      ASSERT_TRUE(std::all_of(dst.begin() + at + bytes, dst.end(), [](unsigned char c) { return c == 0xAB; }))
          << bytes << " bytes at " << at;
    }
  }
}

TEST(Kernels, CopyFillScale) {
  std::vector<float> a(10), b(10);
  std::iota(a.begin(), a.end(), 0.0f);
  copy(a.data(), b.data(), 10);
  EXPECT_EQ(a, b);
  fill(b.data(), 10, 2.5f);
  EXPECT_EQ(b, std::vector<float>(10, 2.5f));
  scale(b.data(), 10, 2.0f);
  EXPECT_EQ(b, std::vector<float>(10, 5.0f));
}

}  // namespace
}  // namespace sharc::rt
