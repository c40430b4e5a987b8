// GPT-2 124M (samples/gpt2/model.cpp's gpt2_124m_train: 12 layers, d=768,
// vocab 50304, AdamW, clipping at 1) at batch 1 x context 256 on one GPU,
// against the same program's CPU build (BACKEND cpu, gpt2_124m_train_data1,
// itself held to the oracle at small sizes): the losses of three steps on
// the same random tokens within 1e-4 of the CPU's, relative, in f32; within
// 1e-2 in bf16 (bf16 compute on f32 master weights). Label cuda: it skips,
// saying why, where there is no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gpt2_124m_train_cuda_bf16_data1.h"
#include "gpt2_124m_train_cuda_data1.h"
#include "gpt2_124m_train_data1.h"
#include "runtime/gpu/gpu_world.h"
#include "runtime/thread_world.h"
#include "samples/gpt2/train_step.h"

namespace sharc {
namespace {

constexpr int kSteps = 3;

// The loss of each of kSteps steps of `Program` on `world`, initialised
// from seed 5, on the same random tokens whichever the program.
template <class Program>
std::vector<float> losses(rt::World& world) {
  Program program(world);
  program.init(5);
  const rt::TensorInfo& info = Program::input_info("tokens");
  std::mt19937_64 rng(11);
  std::vector<float> out;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<float> tokens(static_cast<size_t>(info.elements())), targets(tokens.size());
    for (float& t : tokens) t = static_cast<float>(rng() % 50257);
    for (float& t : targets) t = static_cast<float>(rng() % 50257);
    out.push_back(gpt2::train_step(program, tokens.data(), targets.data(), /*seed=*/0.0f).loss);
  }
  return out;
}

template <class GpuProgram>
void expect_losses_near_the_cpu_program(double rtol, const char* what) {
  std::string why;
  if (!gpu::cuda_kernels(&why)) GTEST_SKIP() << why;
  rt::ThreadWorld cpu_world(sharc_gen::gpt2_124m_train_data1::Program::mesh_shape());
  const std::vector<float> want = losses<sharc_gen::gpt2_124m_train_data1::Program>(cpu_world);
  gpu::CudaWorld gpu_world(GpuProgram::mesh_shape());
  const std::vector<float> got = losses<GpuProgram>(gpu_world);
  double worst = 0;
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(got[s], want[s], rtol * std::fabs(want[s])) << what << ": the loss at step " << s + 1;
    worst = std::max(worst, std::fabs(double{got[s]} - want[s]) / std::fabs(double{want[s]}));
  }
  std::printf("GPT-2 124M, batch 1 x context 256, %s on the GPU: losses %.6f %.6f %.6f, the CPU program's %.6f "
              "%.6f %.6f; worst relative difference %.2e\n",
              what, got[0], got[1], got[2], want[0], want[1], want[2], worst);
}

TEST(Gpt2_124M, F32OnTheGpuGivesTheCpuProgramsLosses) {
  expect_losses_near_the_cpu_program<sharc_gen::gpt2_124m_train_cuda_data1::Program>(1e-4, "f32");
}

TEST(Gpt2_124M, Bf16OnTheGpuGivesTheCpuProgramsLossesWithinOnePercent) {
  expect_losses_near_the_cpu_program<sharc_gen::gpt2_124m_train_cuda_bf16_data1::Program>(1e-2, "bf16");
}

}  // namespace
}  // namespace sharc
