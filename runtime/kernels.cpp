// Implementations of the per-device kernels. The strided engine simplifies a
// (shape, stride) pair before looping: size-1 dimensions are dropped and a
// dimension is merged into its inner neighbour whenever the two are laid out
// contiguously in both input and output. After that a transpose that keeps the
// last dimension copies whole rows, a broadcast fills rows, and a transpose that
// moves the last dimension runs a 16x16 tiled loop so both sides stay in cache.
#include "runtime/kernels.h"

#include "runtime/copy_bytes.h"
#include "runtime/team.h"

#include <cblas.h>
#ifndef SHARC_HAVE_LIBXSMM
#define SHARC_HAVE_LIBXSMM 0
#endif
#if SHARC_HAVE_LIBXSMM
#include <libxsmm.h>
#endif

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace sharc::rt {
namespace {

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = acc;
    acc *= shape[d];
  }
  return s;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

// Drops size-1 dimensions and merges dimension d into d+1 when every stride
// array is contiguous across the pair. `strides` holds one array per operand.
void simplify(std::vector<int64_t>& shape, std::vector<std::vector<int64_t>*> strides) {
  std::vector<int64_t> s;
  std::vector<std::vector<int64_t>> st(strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !s.empty();
    for (size_t k = 0; merge && k < strides.size(); ++k) {
      merge = st[k].back() == (*strides[k])[d] * shape[d];
    }
    if (merge) {
      s.back() *= shape[d];
      for (size_t k = 0; k < strides.size(); ++k) st[k].back() = (*strides[k])[d];
    } else {
      s.push_back(shape[d]);
      for (size_t k = 0; k < strides.size(); ++k) st[k].push_back((*strides[k])[d]);
    }
  }
  shape = std::move(s);
  for (size_t k = 0; k < strides.size(); ++k) *strides[k] = std::move(st[k]);
}

// Calls f(a_offset, b_offset) for every index of `shape` in row-major order,
// maintaining both offsets incrementally (no division in the loop).
template <class F>
void for_each_offset(const std::vector<int64_t>& shape, const std::vector<int64_t>& a_stride,
                     const std::vector<int64_t>& b_stride, F&& f) {
  const int r = static_cast<int>(shape.size());
  const int64_t total = num_elements(shape);
  std::vector<int64_t> idx(r, 0);
  int64_t a = 0, b = 0;
  for (int64_t t = 0; t < total; ++t) {
    f(a, b);
    for (int d = r - 1; d >= 0; --d) {
      a += a_stride[d];
      b += b_stride[d];
      if (++idx[d] < shape[d]) break;
      a -= a_stride[d] * shape[d];
      b -= b_stride[d] * shape[d];
      idx[d] = 0;
    }
  }
}

template <class T>
T sum_row(const T* x, int64_t n) {
  // Eight independent partial sums, partial k taking elements k, k+8, ...:
  // one fixed, deterministic summation order that still vectorises without
  // -ffast-math. For float the eight are one explicit vector (GCC's vector
  // extension, two SSE halves where AVX is off): left to the auto-vectoriser,
  // this loop stayed scalar once inlined into reduce() (5x slower).
  T s[8] = {};
  int64_t j = 0;
  if constexpr (std::is_same_v<T, float>) {
    typedef float F8 __attribute__((vector_size(32)));
    F8 acc = {};
    for (; j + 8 <= n; j += 8) {
      F8 v;
      std::memcpy(&v, x + j, sizeof v);
      acc += v;
    }
    std::memcpy(s, &acc, sizeof acc);
  } else {
    for (; j + 8 <= n; j += 8) {
      for (int k = 0; k < 8; ++k) s[k] += x[j + k];
    }
  }
  // The tail goes to partials 0 .. rest-1, as s[j % 8] would, with a constant
  // index per partial so that s stays in registers.
  const int64_t rest = n - j;
  for (int k = 0; k < 8; ++k)
    if (k < rest) s[k] += x[j + k];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

template <class T>
T max_row(const T* x, int64_t n, T init) {
  // Max is order-independent, so partial maxima change nothing but speed.
  T m[8] = {init, init, init, init, init, init, init, init};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int k = 0; k < 8; ++k) m[k] = x[j + k] > m[k] ? x[j + k] : m[k];
  }
  for (; j < n; ++j) m[0] = std::max(m[0], x[j]);
  for (int k = 1; k < 8; ++k) m[0] = std::max(m[0], m[k]);
  return m[0];
}

std::vector<float> widen(const bf16* x, size_t n) {
  std::vector<float> r(n);
  for (size_t i = 0; i < n; ++i) r[i] = x[i];
  return r;
}

void narrow(const float* x, size_t n, bf16* out) {
  for (size_t i = 0; i < n; ++i) out[i] = bf16(x[i]);
}

#if SHARC_HAVE_LIBXSMM
// libxsmm's JIT-compiled kernels for one (m, n, k, leading dimensions,
// transposes, beta): about twice OpenBLAS's rate on the small and skinny
// GEMMs a sharded step is made of (a 128x64x784 block: 270 against 120
// GFLOP/s on one Zen 4 core). Its kernels are column-major; a row-major
// C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T, so B goes first.
// The kernels want the output's dimension contiguous in B, which a
// transposed B (C = A B^T, the backward pass's dX = dY W^T) does not have:
// it is transposed 64 columns at a time into a per-thread scratch block.
// The output is computed in panels of 64 columns, which keeps B's panel in
// cache for the whole of A. Returns false when no kernel can be made (no
// JIT for this CPU, beta other than 0 or 1): the caller uses BLAS.
bool xsmm_gemm(int m, int n, int k, const float* a, int lda, bool ta, const float* b, int ldb,
               bool tb, float beta, float* c, int ldc) {
  static const bool ready = [] {
    libxsmm_init();
    return true;
  }();
  (void)ready;
  if (beta != 0.0f && beta != 1.0f) return false;
  constexpr int kPanel = 64;
  const float alpha = 1.0f;
  const int flags = ta ? LIBXSMM_GEMM_FLAG_TRANS_B : 0;
  thread_local std::vector<float> scratch;
  for (int n0 = 0; n0 < n; n0 += kPanel) {
    const int w = std::min(kPanel, n - n0);
    const int ldp = tb ? w : ldb;
    const libxsmm_smmfunction kernel =
        libxsmm_smmdispatch(w, m, k, &ldp, &lda, &ldc, &alpha, &beta, &flags, nullptr);
    if (!kernel) {
      if (n0 == 0) return false;
      // A narrower last panel without a kernel: BLAS computes that one.
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                  m, w, k, 1.0f, a, lda, tb ? b + static_cast<int64_t>(n0) * ldb : b + n0, ldb,
                  beta, c + n0, ldc);
      continue;
    }
    const float* panel = b + n0;
    if (tb) {
      // B's rows n0 .. n0+w (each k long) become the k x w panel, in 8-row
      // tiles so that reads and writes both stay within a few cache lines.
      scratch.resize(static_cast<size_t>(k) * w);
      float* t = scratch.data();
      for (int j0 = 0; j0 < w; j0 += 8) {
        const int jn = std::min(8, w - j0);
        for (int kk = 0; kk < k; ++kk)
          for (int j = 0; j < jn; ++j)
            t[static_cast<int64_t>(kk) * w + j0 + j] = b[static_cast<int64_t>(n0 + j0 + j) * ldb + kk];
      }
      panel = t;
    }
    kernel(panel, a, c + n0);
  }
  return true;
}
#endif

// One row-major sgemm: C[m x n] (row stride ldc) = op(A) op(B) + beta C.
void sgemm_block(int m, int n, int k, const float* a, int lda, bool ta, const float* b, int ldb,
                 bool tb, float beta, float* c, int ldc) {
#if SHARC_HAVE_LIBXSMM
  if (xsmm_gemm(m, n, k, a, lda, ta, b, ldb, tb, beta, c, ldc)) return;
#endif
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

const char* gemm_kernels() {
#if SHARC_HAVE_LIBXSMM
  return "libxsmm";
#else
  return "blas";
#endif
}

bool gemm_on_blas_threads() {
  return !SHARC_HAVE_LIBXSMM;
}

int64_t num_elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void gemm(int64_t batch, int64_t M, int64_t N, int64_t K, const float* A, bool trans_a,
          const float* B, bool trans_b, float* C, float beta) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < batch * M * N; ++i) C[i] = beta == 0.0f ? 0.0f : beta * C[i];
    return;
  }
  const int lda = static_cast<int>(trans_a ? M : K);
  const int ldb = static_cast<int>(trans_b ? K : N);
  // One sgemm of rows [m0, m1) and columns [n0, n1) of batch entry b. A
  // split depends only on the shapes and the team's size, so a program and
  // the per-device interpreter on the same world split alike; a smaller
  // block may get another kernel, so results can differ in the last bits
  // from the unsplit call.
  auto block = [&](int64_t b, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    const float* a = A + b * M * K + (trans_a ? m0 : m0 * K);
    const float* bb = B + b * K * N + (trans_b ? n0 * K : n0);
    sgemm_block(static_cast<int>(m1 - m0), static_cast<int>(n1 - n0), static_cast<int>(K), a, lda,
                trans_a, bb, ldb, trans_b, beta, C + b * M * N + m0 * N + n0, static_cast<int>(N));
  };
  // A device with a team of its own (rt::threads_per_device > 1) splits
  // GEMMs worth it (at least 2^22 multiply-adds per part) over the larger of
  // M and N, in parts of whole 16-row or 16-column panels.
  Team* team = current_team();
  const int64_t work = batch * M * N * K;
  constexpr int64_t kMinPerPart = int64_t{1} << 22;
  int parts = team ? static_cast<int>(std::min<int64_t>(team->size(), work / kMinPerPart)) : 1;
  const bool split_m = M >= N;
  const int64_t panels = ((split_m ? M : N) + 15) / 16;
  parts = static_cast<int>(std::min<int64_t>(parts, panels));
  if (parts <= 1) {
    for (int64_t b = 0; b < batch; ++b) block(b, 0, M, 0, N);
    return;
  }
  team->run(parts, [&](int part) {
    const int64_t lo = std::min(panels * part / parts * 16, split_m ? M : N);
    const int64_t hi = std::min(panels * (part + 1) / parts * 16, split_m ? M : N);
    if (lo >= hi) return;
    for (int64_t b = 0; b < batch; ++b) {
      if (split_m)
        block(b, lo, hi, 0, N);
      else
        block(b, 0, M, lo, hi);
    }
  });
}

void gemm(int64_t batch, int64_t M, int64_t N, int64_t K, const bf16* A, bool trans_a,
          const bf16* B, bool trans_b, bf16* C) {
  const std::vector<float> a = widen(A, batch * M * K), b = widen(B, batch * K * N);
  std::vector<float> c(batch * M * N);
  gemm(batch, M, N, K, a.data(), trans_a, b.data(), trans_b, c.data());
  narrow(c.data(), c.size(), C);
}

template <class T>
void strided_copy(const T* in, const std::vector<int64_t>& shape_in,
                  const std::vector<int64_t>& in_strides, T* out) {
  if (num_elements(shape_in) == 0) return;
  std::vector<int64_t> shape = shape_in, is = in_strides, os = contiguous_strides(shape_in);
  simplify(shape, {&is, &os});
  const int r = static_cast<int>(shape.size());
  if (r == 0) {
    out[0] = in[0];
    return;
  }
  const int64_t n = shape[r - 1], step = is[r - 1];

  // Tiled path: the input's unit-stride dimension k is not the output's last,
  // so a row loop would read with a large stride; walk (k, last) in tiles.
  int k = -1;
  for (int d = 0; d < r - 1 && step != 0 && step != 1; ++d) {
    if (is[d] == 1) k = d;
  }
  if (k >= 0) {
    constexpr int64_t kTile = 16;  // measured: 16 beats 8, 32 and 64 on 2048^2
    const int64_t m = shape[k], out_k = os[k];
    std::vector<int64_t> rs, ris, ros;  // the remaining dimensions
    for (int d = 0; d < r - 1; ++d) {
      if (d == k) continue;
      rs.push_back(shape[d]);
      ris.push_back(is[d]);
      ros.push_back(os[d]);
    }
    for_each_offset(rs, ris, ros, [&](int64_t a, int64_t b) {
      for (int64_t i0 = 0; i0 < m; i0 += kTile) {
        const int64_t i1 = std::min(m, i0 + kTile);
        for (int64_t j0 = 0; j0 < n; j0 += kTile) {
          const int64_t j1 = std::min(n, j0 + kTile);
          for (int64_t i = i0; i < i1; ++i) {
            const T* src = in + a + i;
            T* dst = out + b + i * out_k;
            for (int64_t j = j0; j < j1; ++j) dst[j] = src[j * step];
          }
        }
      }
    });
    return;
  }

  shape.pop_back();
  is.pop_back();
  os.pop_back();
  for_each_offset(shape, is, os, [&](int64_t a, int64_t b) {
    const T* src = in + a;
    T* dst = out + b;
    if (step == 1) {
      copy_bytes(dst, src, n * sizeof(T));
    } else if (step == 0) {
      std::fill(dst, dst + n, *src);
    } else {
      for (int64_t j = 0; j < n; ++j) dst[j] = src[j * step];
    }
  });
}

template <class T>
void transpose(const T* in, const std::vector<int64_t>& in_shape, const std::vector<int>& perm,
               T* out) {
  const size_t r = in_shape.size();
  std::vector<bool> seen(r, false);
  bool ok = perm.size() == r;
  for (size_t i = 0; ok && i < r; ++i) {
    ok = perm[i] >= 0 && static_cast<size_t>(perm[i]) < r && !seen[perm[i]];
    if (ok) seen[perm[i]] = true;
  }
  if (!ok) {
    std::string p;
    for (size_t i = 0; i < perm.size(); ++i) p += (i ? ", " : "") + std::to_string(perm[i]);
    throw std::invalid_argument("transpose: perm (" + p + ") is not a permutation of the " +
                                std::to_string(r) + " dims of " + shape_str(in_shape));
  }
  const std::vector<int64_t> in_strides = contiguous_strides(in_shape);
  std::vector<int64_t> shape(r), strides(r);
  for (size_t i = 0; i < r; ++i) {
    shape[i] = in_shape[perm[i]];
    strides[i] = in_strides[perm[i]];
  }
  strided_copy(in, shape, strides, out);
}

template <class T>
void broadcast(const T* in, const std::vector<int64_t>& in_shape,
               const std::vector<int64_t>& out_shape, T* out) {
  const size_t ri = in_shape.size(), ro = out_shape.size();
  auto fail = [&] {
    throw std::invalid_argument("broadcast: cannot broadcast " + shape_str(in_shape) + " to " +
                                shape_str(out_shape));
  };
  if (ri > ro) fail();
  const std::vector<int64_t> in_strides = contiguous_strides(in_shape);
  std::vector<int64_t> strides(ro, 0);
  for (size_t d = ro - ri; d < ro; ++d) {
    const size_t di = d - (ro - ri);
    if (in_shape[di] == out_shape[d]) {
      strides[d] = in_strides[di];
    } else if (in_shape[di] != 1) {
      fail();
    }
  }
  strided_copy(in, out_shape, strides, out);
}

template <class T>
void reduce(const T* in, const std::vector<int64_t>& in_shape, const std::vector<int>& axes,
            ReduceOp op, T* out) {
  if constexpr (std::is_same_v<T, bf16>) {
    // In f32, one rounding per result.
    std::vector<int64_t> out_shape;
    for (int d = 0; d < static_cast<int>(in_shape.size()); ++d)
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) out_shape.push_back(in_shape[d]);
    const std::vector<float> x = widen(in, num_elements(in_shape));
    std::vector<float> y(num_elements(out_shape));
    reduce(x.data(), in_shape, axes, op, y.data());
    narrow(y.data(), y.size(), out);
    return;
  } else {
    const int r = static_cast<int>(in_shape.size());
    std::vector<bool> reduced(r, false);
    for (int a : axes) {
      if (a < 0 || a >= r || reduced[a]) {
        throw std::invalid_argument("reduce: axis " + std::to_string(a) +
                                    (a >= 0 && a < r ? " repeated" : " out of range") + " for " +
                                    shape_str(in_shape));
      }
      reduced[a] = true;
    }
    // Output strides over the input's dimensions: 0 on reduced axes, so every
    // input element lands on its output element.
    std::vector<int64_t> os(r, 0);
    int64_t out_count = 1;
    for (int d = r - 1; d >= 0; --d) {
      if (reduced[d]) continue;
      os[d] = out_count;
      out_count *= in_shape[d];
    }
    const T identity = op == ReduceOp::kSum                   ? T(0)
                       : std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                              : std::numeric_limits<T>::lowest();
    std::fill(out, out + out_count, identity);
    if (num_elements(in_shape) == 0) return;

    std::vector<int64_t> shape = in_shape, is = contiguous_strides(in_shape);
    simplify(shape, {&is, &os});
    if (shape.empty()) {  // every dimension had size 1
      out[0] = in[0];
      return;
    }
    const int64_t n = shape.back();
    const bool inner_reduced = os.back() == 0;
    shape.pop_back();
    is.pop_back();
    os.pop_back();
    for_each_offset(shape, is, os, [&](int64_t a, int64_t b) {
      const T* x = in + a;
      T* y = out + b;
      if (inner_reduced) {
        if (op == ReduceOp::kSum) {
          *y += sum_row(x, n);
        } else {
          *y = max_row(x, n, *y);
        }
      } else if (op == ReduceOp::kSum) {
        for (int64_t j = 0; j < n; ++j) y[j] += x[j];
      } else {
        for (int64_t j = 0; j < n; ++j) y[j] = std::max(y[j], x[j]);
      }
    });
  }
}

template <class T>
void copy(const T* in, T* out, size_t count) {
  copy_bytes(out, in, count * sizeof(T));
}

template <class T>
void fill(T* out, size_t count, float value) {
  T v;
  if constexpr (std::is_same_v<T, bf16>)
    v = bf16(value);
  else
    v = static_cast<T>(value);
  std::fill(out, out + count, v);
}

void scale(float* data, size_t count, float factor) {
  for (size_t i = 0; i < count; ++i) data[i] *= factor;
}

#define SHARC_KERNELS_FOR(T)                                                                      \
  template void strided_copy<T>(const T*, const std::vector<int64_t>&,                            \
                                const std::vector<int64_t>&, T*);                                 \
  template void transpose<T>(const T*, const std::vector<int64_t>&, const std::vector<int>&, T*); \
  template void broadcast<T>(const T*, const std::vector<int64_t>&, const std::vector<int64_t>&,  \
                             T*);                                                                 \
  template void reduce<T>(const T*, const std::vector<int64_t>&, const std::vector<int>&,         \
                          ReduceOp, T*);                                                          \
  template void copy<T>(const T*, T*, size_t);                                                    \
  template void fill<T>(T*, size_t, float);
SHARC_KERNELS_FOR(float)
SHARC_KERNELS_FOR(bf16)
SHARC_KERNELS_FOR(int32_t)
#undef SHARC_KERNELS_FOR

}  // namespace sharc::rt
