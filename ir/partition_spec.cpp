// Printing of PartitionSpec in JAX's spelling.
#include "ir/partition_spec.h"

namespace sharc {

std::string P::str() const {
  std::string s = "P(";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    const auto& a = dims_[i].axes;
    if (a.empty()) {
      s += "None";
    } else if (a.size() == 1) {
      s += "'" + a[0] + "'";
    } else {
      s += "(";
      for (size_t j = 0; j < a.size(); ++j) s += (j ? ", '" : "'") + a[j] + "'";
      s += ")";
    }
  }
  return s + ")";
}

}  // namespace sharc
