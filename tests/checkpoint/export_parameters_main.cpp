// Exports the MLP classifier's parameters after one training step on
// data=4,model=2 to <dir>/params.safetensors, and writes <dir>/expected.txt,
// one line per parameter: its name, its shape (comma-separated), its first,
// middle and last values (%.9g: exact for float32) and the sum of its values.
// read_export.py checks them against what Python's safetensors package reads.
//   export_parameters_main <dir>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "mlp_train_data4_model2.h"
#include "runtime/checkpoint.h"

namespace gen = sharc_gen::mlp_train_data4_model2;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: export_parameters_main <dir>\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  sharc::rt::ThreadWorld world(gen::mesh_shape());
  gen::Program program(world);
  program.init(11);
  std::vector<float> images(128 * 784), labels(128);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<float>(i % 10);
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<float>(std::cos(0.01 * static_cast<double>(i)));
  float loss = 0, grad_norm = 0, lr = 0, accuracy = 0;
  gen::Program::Inputs in;
  in.images = images.data();
  in.labels = labels.data();
  gen::Program::Outputs out;
  out.loss = &loss;
  out.grad_norm = &grad_norm;
  out.lr = &lr;
  out.accuracy = &accuracy;
  program.step(in, out);

  sharc::rt::export_parameters(sharc::rt::checkpoint_target(program), dir / "params.safetensors");
  std::FILE* f = std::fopen((dir / "expected.txt").c_str(), "w");
  if (!f) return 1;
  for (const sharc::rt::TensorInfo& p : gen::kParameters) {
    std::vector<float> v(static_cast<size_t>(p.elements()));
    program.get_parameter(p.name, v);
    std::string shape;
    for (size_t d = 0; d < p.shape.size(); ++d) shape += (d ? "," : "") + std::to_string(p.shape[d]);
    double sum = 0;
    for (float x : v) sum += x;
    std::fprintf(f, "%s %s %.9g %.9g %.9g %.17g\n", std::string(p.name).c_str(), shape.empty() ? "-" : shape.c_str(),
                 v.front(), v[v.size() / 2], v.back(), sum);
  }
  std::fclose(f);
  std::printf("exported %zu parameters to %s\n", gen::kParameters.size(), (dir / "params.safetensors").c_str());
  return 0;
}
