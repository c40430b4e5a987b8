// The double-precision reference the GEMM tests compare rt::gemm with
// (kernels_test.cpp, team_test.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace sharc::rt::testing {

// Largest |C - A.B| / sum |a * b| over every element of a batched row-major
// GEMM, laid out as rt::gemm takes it.
inline double gemm_max_relative_error(int64_t batch, int64_t M, int64_t N, int64_t K,
                                      const std::vector<float>& A, bool ta,
                                      const std::vector<float>& B, bool tb,
                                      const std::vector<float>& C) {
  double max_rel = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double a = A[b * M * K + (ta ? k * M + i : i * K + k)];
          const double bv = B[b * K * N + (tb ? j * K + k : k * N + j)];
          ref += a * bv;
          mag += std::abs(a * bv);
        }
        max_rel = std::max(max_rel, std::abs(C[(b * M + i) * N + j] - ref) / mag);
      }
  return max_rel;
}

}  // namespace sharc::rt::testing
