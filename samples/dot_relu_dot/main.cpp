// DotReluDot on 8 simulated devices. The generated program (dot_relu_dot.h,
// written at build time by sharc_add_program from model.cpp for the mesh
// data=2,model=4) runs init + forward on a ThreadWorld; this driver prints how
// dot1's kernel, w2 and the output are laid out over the mesh, the bytes each
// device sent and its peak memory, and checks the output against the oracle
// (the global program traced in-process and interpreted in fp64). It exits
// non-zero on a mismatch, so `ctest` runs it as a test.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "codegen/interpret.h"
#include "dot_relu_dot.h"
#include "runtime/visualize.h"
#include "samples/dot_relu_dot/model.h"

namespace gen = sharc_gen::dot_relu_dot;

namespace {

template <size_t N>
void show_layout(const char* what, const std::array<int64_t, N>& shape, const gen::Spec& spec,
                 const sharc::rt::MeshShape& mesh) {
  std::printf("%s:\n%s\n", what,
              sharc::rt::visualize_sharding({shape.begin(), shape.end()}, spec, mesh).c_str());
}

}  // namespace

int main() {
  sharc::rt::ThreadWorld world(gen::mesh_shape());
  gen::Program program(world);
  program.init(/*seed=*/0);

  // A deterministic input batch: x[i] = sin(0.37 i) + 0.25, the tests' input.
  const int64_t n_in = gen::kInput_x_shape[0] * gen::kInput_x_shape[1];
  std::vector<float> x(n_in);
  for (int64_t i = 0; i < n_in; ++i) x[i] = static_cast<float>(std::sin(0.37 * i) + 0.25);
  std::vector<float> y(gen::kOutput_y_shape[0] * gen::kOutput_y_shape[1]);
  gen::Program::Inputs in;
  in.x = x.data();
  gen::Program::Outputs out;
  out.y = y.data();
  program.forward(in, out);

  std::printf("DotReluDot on %d devices, mesh %s\n\n", gen::kNumDevices,
              std::string(gen::kMesh).c_str());
  show_layout("dot1/kernel", gen::kParam_dot1_kernel_shape, gen::kParam_dot1_kernel_spec,
              world.mesh());
  show_layout("w2", gen::kParam_w2_shape, gen::kParam_w2_spec, world.mesh());
  show_layout("y", gen::kOutput_y_shape, gen::kOutput_y_spec, world.mesh());

  std::printf("per device: bytes sent by collectives, peak memory\n");
  for (int r = 0; r < world.size(); ++r) {
    const sharc::rt::CommStats& s = world.comm(r).stats();
    std::printf("  device %d: %llu bytes sent (%llu collective calls), peak %zu bytes\n", r,
                static_cast<unsigned long long>(s.total_bytes()),
                static_cast<unsigned long long>(s.total_calls()), world.memory(r).peak());
  }

  // The oracle: the same program, traced here and interpreted globally in fp64.
  sharc::ir::Graph global = sharc::trace(
      "dot_relu_dot", [](sharc::ProgramBuilder& b) { dot_relu_dot::build_dot_relu_dot(b); });
  const std::vector<double> want =
      sharc::interpret(global, {{"x", std::vector<double>(x.begin(), x.end())}}, /*seed=*/0)
          .at("y");
  double scale = 0, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    worst = std::max(worst, std::fabs(y[i] - want[i]));
  }
  // fp32 per-device math against the fp64 oracle: a 1024-long dot of O(1)
  // values accumulates ~1e-7 relative error per term; 1e-5 of max|y| leaves a
  // 10x margin.
  const double tolerance = 1e-5 * scale;
  const bool pass = worst <= tolerance;
  std::printf("\nmax |y - oracle| = %.3g (tolerance %.3g = 1e-5 * max|y| %.3g): %s\n", worst,
              tolerance, scale, pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
