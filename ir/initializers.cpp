// Printing of initializers (for IR dumps and generated comments).
#include "ir/initializers.h"

#include <sstream>

namespace sharc {

std::string Initializer::str() const {
  std::ostringstream os;
  os.precision(9);
  switch (kind) {
    case InitKind::kZeros: os << "zeros()"; break;
    case InitKind::kOnes: os << "ones()"; break;
    case InitKind::kConstant: os << "constant(" << a << ")"; break;
    case InitKind::kNormal: os << "normal(" << a << ")"; break;
    case InitKind::kUniform: os << "uniform(" << a << ")"; break;
    case InitKind::kLecunNormal: os << "lecun_normal()"; break;
    case InitKind::kXavierUniform: os << "xavier_uniform()"; break;
  }
  if (!stack_scope.empty()) os << " per layer of " << stack_scope;
  return os.str();
}

}  // namespace sharc
