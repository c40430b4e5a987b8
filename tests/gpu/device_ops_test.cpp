// The runtime calls of generated CUDA programs (runtime/gpu/device_ops.h) on
// the block simulator, against the CPU runtime's calls of the same name
// (runtime/kernels.h, runtime/tensor_collectives.h): every layout call must
// give the same elements; reductions the same bits where they add in the
// same order, else within f32 rounding; GEMMs within f32 rounding.
// Also: the GEMM against an fp64 product, and the simulator's refusal of a
// kernel launched as barrier-free that waits at a barrier.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/gpu/device_ops.h"
#include "runtime/kernels.h"
#include "runtime/tensor_collectives.h"

namespace sharc::gpu {
namespace {

DeviceContext sim() { return DeviceContext{&simulated_kernels(), nullptr}; }

std::vector<float> values(int64_t n, double phase) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(0.37 * i + phase) * 3.0);
  return v;
}

template <class T>
std::vector<T> as(const std::vector<float>& v) {
  std::vector<T> out;
  for (float x : v) out.push_back(T(x));
  return out;
}

// Bitwise equality, bf16 and i32 included.
template <class T>
void expect_same(const std::vector<T>& want, const std::vector<T>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(0, std::memcmp(&want[i], &got[i], sizeof(T)))
        << what << ": element " << i << " is " << static_cast<float>(got[i]) << ", the CPU runtime's "
        << static_cast<float>(want[i]);
}

template <class T>
void layout_calls_match_the_cpu_runtime() {
  const std::vector<int64_t> shape = {3, 4, 5};
  const std::vector<T> x = as<T>(values(60, 0.3));
  const DeviceContext d = sim();
  {
    std::vector<T> want(24), got(24);  // a [3,2,4] window with strides
    rt::strided_copy(x.data() + 1, {3, 2, 4}, {20, 10, 1}, want.data());
    strided_copy(d, x.data() + 1, {3, 2, 4}, {20, 10, 1}, got.data());
    expect_same(want, got, "strided_copy");
  }
  for (const std::vector<int>& perm : {std::vector<int>{2, 0, 1}, std::vector<int>{1, 2, 0}}) {
    std::vector<T> want(60), got(60);
    rt::transpose(x.data(), shape, perm, want.data());
    transpose(d, x.data(), shape, perm, got.data());
    expect_same(want, got, "transpose");
  }
  {
    std::vector<T> want(60), got(60);
    rt::broadcast(x.data(), {3, 1, 5}, shape, want.data());
    broadcast(d, x.data(), {3, 1, 5}, shape, got.data());
    expect_same(want, got, "broadcast");
  }
  for (const std::vector<int>& axes :
       {std::vector<int>{2}, std::vector<int>{1}, std::vector<int>{0, 2}, std::vector<int>{0, 1, 2}})
    for (const rt::ReduceOp op : {rt::ReduceOp::kSum, rt::ReduceOp::kMax}) {
      int64_t n = 1;
      for (int k = 0; k < 3; ++k)
        if (std::find(axes.begin(), axes.end(), k) == axes.end()) n *= shape[k];
      std::vector<T> want(n), got(n);
      rt::reduce(x.data(), shape, axes, op, want.data());
      reduce(d, x.data(), shape, axes, op, got.data());
      const std::string what = "reduce over " + std::to_string(axes.size()) + " axes";
      // The same bits for a max, and for a sum over the innermost dimension
      // (one contiguous run per result: the same eight partials); other sums
      // add in another order, within 1e-6 of the values' scale (3).
      if (op == rt::ReduceOp::kMax || axes == std::vector<int>{2} || std::is_same_v<T, rt::bf16>) {
        if (!std::is_same_v<T, rt::bf16> || op == rt::ReduceOp::kMax) expect_same(want, got, what);
        else
          for (int64_t i = 0; i < n; ++i)  // bf16: one rounding of nearly equal f32 sums
            EXPECT_NEAR(static_cast<float>(got[i]), static_cast<float>(want[i]),
                        0.01f * std::fabs(static_cast<float>(want[i])) + 1e-6f) << what;
      } else {
        for (int64_t i = 0; i < n; ++i)
          EXPECT_NEAR(static_cast<float>(got[i]), static_cast<float>(want[i]), 1e-6 * 3 * 60) << what;
      }
    }
  for (int index = 0; index < 2; ++index) {
    std::vector<T> want(30), got(30);
    rt::slice_block(x.data(), {3, 4, 5}, /*dim=*/1, /*parts=*/2, index, want.data());
    slice_block(d, x.data(), {3, 4, 5}, 1, 2, index, got.data());
    expect_same(want, got, "slice_block");
    std::vector<T> placed_want(60, T(0.0f)), placed_got(60, T(0.0f));
    rt::place_block(want.data(), {3, 4, 5}, 1, 2, index, placed_want.data());
    place_block(d, got.data(), {3, 4, 5}, 1, 2, index, placed_got.data());
    expect_same(placed_want, placed_got, "place_block");
  }
  {
    std::vector<T> want(60), got(60);
    rt::fill(want.data(), 60, 2.75f);
    fill(d, got.data(), 60, 2.75f);
    expect_same(want, got, "fill");
    rt::copy(x.data(), want.data(), 60);
    copy(d, x.data(), got.data(), 60);
    expect_same(want, got, "copy");
  }
}

TEST(DeviceOps, LayoutCallsMatchTheCpuRuntimeF32) { layout_calls_match_the_cpu_runtime<float>(); }
TEST(DeviceOps, LayoutCallsMatchTheCpuRuntimeBF16) { layout_calls_match_the_cpu_runtime<rt::bf16>(); }
TEST(DeviceOps, LayoutCallsMatchTheCpuRuntimeI32) {
  const std::vector<float> x = values(60, 0.3);
  std::vector<int32_t> xi;
  for (float v : x) xi.push_back(static_cast<int32_t>(v * 10));
  std::vector<int32_t> want(60), got(60);
  rt::transpose(xi.data(), {3, 4, 5}, {2, 1, 0}, want.data());
  transpose(sim(), xi.data(), {3, 4, 5}, {2, 1, 0}, got.data());
  expect_same(want, got, "i32 transpose");
}

// A pad (copy_rows into zeros), an add_slice (add_rows), a ring's sum (add)
// and an iota, against loops.
// Long reductions (device_ops_impl.h's kLongReduction or more elements per
// result) run spread over threads: a warp per result over the innermost run
// (the [rows, cols] -> [rows] statistics of a layer norm), a block per 32
// results otherwise, with one stride ([rows, cols] -> [cols], a bias
// gradient; also two reduced axes that run as one) or any layout (axes 0 and
// 2 of three). Against the CPU runtime's: maxima the same bits, sums within
// f32 rounding of their many terms; result counts that are not a multiple of
// a tile or of a block's warps.
TEST(DeviceOps, LongReductionsMatchTheCpuRuntime) {
  struct Case {
    std::vector<int64_t> shape;
    std::vector<int> axes;
  };
  const Case cases[] = {{{45, 300}, {1}},       {{600, 37}, {0}},     {{20, 30, 33}, {0, 1}},
                        {{20, 33, 30}, {0, 2}}, {{3, 700, 5}, {1}},   {{2000, 40}, {0}}};
  for (const Case& c : cases)
    for (const rt::ReduceOp op : {rt::ReduceOp::kSum, rt::ReduceOp::kMax}) {
      int64_t n = 1, all = 1;
      for (size_t k = 0; k < c.shape.size(); ++k) {
        all *= c.shape[k];
        if (std::find(c.axes.begin(), c.axes.end(), static_cast<int>(k)) == c.axes.end()) n *= c.shape[k];
      }
      const std::vector<float> x = values(all, 0.7);
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), -1.0f);
      rt::reduce(x.data(), c.shape, c.axes, op, want.data());
      // With the KernelSet's scratch (two passes over slices of the reduced
      // elements, where the results are not one contiguous run each), and
      // without (one pass).
      for (const bool scratch : {true, false}) {
        const DeviceContext d{scratch ? &simulated_kernels() : nullptr, nullptr};
        std::fill(got.begin(), got.end(), -1.0f);
        reduce(d, x.data(), c.shape, c.axes, op, got.data());
        const std::string what = "reduce of " + std::to_string(all) + " elements to " + std::to_string(n) +
                                 (op == rt::ReduceOp::kMax ? " (max)" : " (sum)") +
                                 (scratch ? ", in slices" : ", in one pass");
        if (op == rt::ReduceOp::kMax) {
          expect_same(want, got, what);
          continue;
        }
        const double terms = static_cast<double>(all / n);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_NEAR(got[i], want[i], 3.0 * terms * 1e-6) << what << ", result " << i;
      }
    }
}

TEST(DeviceOps, RowsAndIota) {
  const std::vector<float> in = values(12, 1.1);  // 3 rows of 4
  std::vector<float> out(3 * 7, 0.0f), want(3 * 7, 0.0f);
  copy_rows(sim(), in.data(), out.data(), 3, 4, 7, 2);
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 4; ++j) want[r * 7 + 2 + j] = in[r * 4 + j];
  expect_same(want, out, "copy_rows");
  add_rows(sim(), in.data(), out.data(), 3, 4, 7, 1);
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 4; ++j) want[r * 7 + 1 + j] += in[r * 4 + j];
  expect_same(want, out, "add_rows");

  std::vector<float> sum(12);
  add(sim(), in.data(), in.data(), sum.data(), 12);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(sum[i], in[i] + in[i]) << i;

  std::vector<float> iota_out(24);
  iota(sim(), iota_out.data(), 24, /*inner=*/4, /*extent=*/3, /*start=*/10);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(iota_out[i], static_cast<float>(10 + (i / 4) % 3)) << i;
}

// gemm: an fp64 product to 1e-6 and the CPU runtime's rt::gemm to 2e-6 of the
// sum of the terms' sizes (f32's rounding; their summation orders differ),
// every transpose and a batch of 2.
TEST(DeviceOps, GemmMatchesTheCpuRuntimeAndFp64) {
  const int64_t B = 2, M = 5, N = 7, K = 33;
  const std::vector<float> a = values(B * M * K, 0.1), b = values(B * K * N, 2.0);
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      std::vector<float> want(B * M * N), got(B * M * N);
      rt::gemm(B, M, N, K, a.data(), ta, b.data(), tb, want.data());
      gemm(sim(), B, M, N, K, a.data(), ta, b.data(), tb, got.data());
      for (int64_t bb = 0; bb < B; ++bb)
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double ref = 0, mag = 0;  // mag: the sum of the terms' sizes, which f32's error scales with
            for (int64_t p = 0; p < K; ++p) {
              const double av = a[bb * M * K + (ta ? p * M + i : i * K + p)];
              const double bv = b[bb * K * N + (tb ? j * K + p : p * N + j)];
              ref += av * bv;
              mag += std::fabs(av * bv);
            }
            const int64_t c = bb * M * N + i * N + j;
            EXPECT_NEAR(got[c], ref, 1e-6 * mag) << "trans " << ta << tb << " at " << c;
            EXPECT_NEAR(got[c], want[c], 2e-6 * mag) << "trans " << ta << tb << " at " << c;
          }
    }
}

TEST(DeviceOps, TransfersRoundTrip) {
  const std::vector<float> host = values(20, 0.5);  // [4,5]
  std::vector<float> device(6), back(6);
  upload_strided(sim(), host.data() + 1, {2, 3}, {5, 1}, device.data());  // rows 0-1, cols 1-3
  download(sim(), back.data(), device.data(), 6);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(back[r * 3 + c], host[r * 5 + 1 + c]);
}

SHARC_KERNEL void waits_kernel(float* x) {
  x[thread_x()] = 1.0f;
  sync_block();
}

TEST(DeviceOps, ABarrierInABarrierFreeLaunchIsRefused) {
  std::vector<float> x(32);
  try {
    launch_independent("waits_kernel", waits_kernel, Dim3{1}, Dim3{32}, 0, nullptr, x.data());
    FAIL() << "no error";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel waits_kernel was launched as one whose threads never "
                                         "wait for each other (launch_independent), but it calls a sync_block"),
              std::string::npos)
        << e.what();
  }
}

TEST(DeviceOps, BadShapesAreRefusedByName) {
  std::vector<float> x(8), y(8);
  try {
    transpose(sim(), x.data(), {2, 4}, {0, 0}, y.data());
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "transpose: the permutation does not fit the shape");
  }
  try {
    slice_block(sim(), x.data(), {2, 4}, 1, 3, 0, y.data());
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "slice_block: block 0 of 3 along dim 1 does not fit the shape");
  }
}

}  // namespace
}  // namespace sharc::gpu
