// Trains the regressor (model.cpp) on three meshes from the same seed and the
// same batches, and checks that the strategy does not change the numbers:
// every step's loss agrees across meshes within 1e-5 relative (fp32 sums
// taken in a different order on each mesh differ by a few ulps, far below).
// The driver hard-codes no shape: it sizes every buffer from the generated
// tables (kInputs, kParameters) and binds inputs and outputs by name.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "regressor_data2_model2.h"
#include "regressor_data4.h"
#include "regressor_fsdp4.h"

namespace {

constexpr int kSteps = 20;

// Batch `step` of a fixed synthetic problem: y = sin(x . a), x uniform.
void batch(int step, std::vector<float>& x, std::vector<float>& y) {
  uint64_t state = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(step + 1);
  auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((state >> 40) * 0x1.0p-24) * 2.0f - 1.0f;
  };
  const size_t features = x.size() / y.size();
  for (size_t i = 0; i < y.size(); ++i) {
    float dot = 0;
    for (size_t j = 0; j < features; ++j) {
      x[i * features + j] = uniform();
      dot += x[i * features + j] * (j % 2 ? 0.3f : -0.2f);
    }
    y[i] = std::sin(dot);
  }
}

// The losses of kSteps training steps of Program on its own mesh.
template <class Program>
std::vector<float> train(const char* mesh) {
  sharc::rt::ThreadWorld world(Program::mesh_shape());
  Program program(world);
  program.init(/*seed=*/0);

  std::printf("%s: %zu parameters\n", mesh, Program::parameters().size());
  for (const sharc::rt::TensorInfo& p : Program::parameters())
    std::printf("  %-20s %-10s %-18s per device %-10s %6zu bytes\n", std::string(p.name).c_str(),
                p.type_str().c_str(), p.spec_str().c_str(), p.local_type_str().c_str(),
                p.local_bytes());

  std::vector<float> x(Program::input_info("x").elements());
  std::vector<float> y(Program::input_info("y").elements());
  float loss = 0, grad_norm = 0, lr = 0;
  typename Program::Inputs in;
  in.set("x", x).set("y", y);
  typename Program::Outputs out;
  out.set("loss", {&loss, 1}).set("grad_norm", {&grad_norm, 1}).set("lr", {&lr, 1});
  std::vector<float> losses;
  for (int step = 0; step < kSteps; ++step) {
    batch(step, x, y);
    program.step(in, out);
    losses.push_back(loss);
  }
  return losses;
}

}  // namespace

int main() {
  const std::vector<std::vector<float>> runs = {
      train<sharc_gen::regressor_data4::Program>("data=4"),
      train<sharc_gen::regressor_fsdp4::Program>("fsdp=4"),
      train<sharc_gen::regressor_data2_model2::Program>("data=2,model=2"),
  };

  std::printf("\nstep   data=4      fsdp=4      data=2,model=2\n");
  double worst = 0;
  for (int s = 0; s < kSteps; ++s) {
    std::printf("%4d  %.7f  %.7f  %.7f\n", s + 1, runs[0][s], runs[1][s], runs[2][s]);
    for (size_t r = 1; r < runs.size(); ++r)
      worst = std::fmax(worst, std::fabs(runs[r][s] - runs[0][s]) / std::fabs(runs[0][s]));
  }
  const bool same = worst <= 1e-5;
  const bool learned = runs[0].back() < 0.5f * runs[0].front();
  std::printf("\nlargest relative loss difference across meshes: %.1e (%s, tolerance 1e-5)\n",
              worst, same ? "PASS" : "FAIL");
  std::printf("loss %.4f -> %.4f over %d steps (%s, must halve)\n", runs[0].front(),
              runs[0].back(), kSteps, learned ? "PASS" : "FAIL");
  return same && learned ? 0 : 1;
}
