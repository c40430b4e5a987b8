// One training step of a generated GPT-2 training program (any of
// model.cpp's: gpt2_train, gpt2_train_pipelined, gpt2_124m_train, on any
// backend and mesh): the token ids and their targets as f32 (the sample's
// convention), the dropout seed, and what the step returns. Header-only; the
// sample, its tests and bench_gpt2_gpu bind a step through it.
#pragma once

namespace gpt2 {

struct StepResult {
  float loss = 0, grad_norm = 0, lr = 0;
};

// One step of `program` on batch x context token ids and targets (the
// program's "tokens" shape); seed draws its dropout masks (none in the 124M
// configuration, which ignores it).
template <class TrainProgram>
StepResult train_step(TrainProgram& program, const float* tokens, const float* targets, float seed) {
  StepResult r;
  typename TrainProgram::Inputs in;
  in.tokens = tokens;
  in.targets = targets;
  in.dropout_seed = &seed;
  typename TrainProgram::Outputs out;
  out.loss = &r.loss;
  out.grad_norm = &r.grad_norm;
  out.lr = &r.lr;
  program.step(in, out);
  return r;
}

}  // namespace gpt2
