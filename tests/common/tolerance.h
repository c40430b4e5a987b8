// The error measure the oracle comparisons state their tolerances in: the
// largest |got - want| over a tensor, relative to the tensor's largest
// |want|, so one bound serves tensors of any scale and small elements are
// not judged alone. Header-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace sharc::testing {

template <class Got>
double rel_error(const std::vector<Got>& got, const std::vector<double>& want) {
  double scale = 1e-300, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return worst / scale;
}

}  // namespace sharc::testing
