@SHARC_BANNER@
//
// One SPMD function, Program::forward_device(), runs on every device with its
// own rank: local shapes are the same everywhere, only block offsets and
// collective groups depend on the rank, and those are fixed once per device
// when Program is constructed. Buffers are charged to the device's
// rt::DeviceMemory and freed after their last use; parameter shards persist,
// and a training step ends by handing each updated parameter its new value.
// Every kernel and collective names the DSL line that caused it and the
// layout change it makes; the statements match the per-device interpreter
// (codegen/execute.cpp) call for call, except that elementwise ops are
// fused into loops (a loop may also keep values that later statements read).
//
// The per-device state (Program::Device) and the step's struct (Program::Step)
// are in @SHARC_STEP_HEADER_NAME@. The step's parts are member functions of
// Program::Step; @SHARC_PARTS_WHERE@
//
// The fixed text comes from templates/program.cpp; codegen/emit_cpu.cpp fills in
// the program-specific parts.
#include "@SHARC_STEP_HEADER_NAME@"

#include <stdexcept>
#include <string>

namespace @SHARC_NAMESPACE@ {

@SHARC_TENSOR_DEFINITIONS@

namespace {

@SHARC_INIT_SPECS@

}  // namespace

Program::Program(rt::World& world) : world_(world), local_ranks_(world.local_ranks()) {
  if (world.mesh().to_string() != kMesh)
    throw std::invalid_argument("generated for mesh " + std::string(kMesh) + ", not " +
                                world.mesh().to_string());
  devices_.resize(kNumDevices);
  for (int rank : local_ranks_) {
    auto dev = std::make_unique<Device>();
    [[maybe_unused]] rt::DeviceMemory& mem = world.memory(rank);
    const std::vector<int> coords = world.mesh().coords(rank);
@SHARC_DEVICE_SETUP@
    devices_[rank] = std::move(dev);
  }
}

Program::~Program() = default;

void Program::init(uint64_t seed) {
  world_.run([&](int rank) { init_device(rank, seed); });
}

void Program::init_device(int rank, [[maybe_unused]] uint64_t seed) {
  [[maybe_unused]] Device& dev = *devices_[rank];
@SHARC_INIT_BODY@
}  // Program::init_device

Program::Inputs& Program::Inputs::set(std::string_view name,
                                      [[maybe_unused]] std::span<const float> values) {
@SHARC_INPUTS_SET@
  input_info(name);  // throws: no such input
  return *this;
}

Program::Inputs& Program::Inputs::set(std::string_view name,
                                      [[maybe_unused]] std::span<const int32_t> values) {
@SHARC_INPUTS_SET_I32@
  input_info(name);  // throws: no such input
  return *this;
}

Program::Inputs& Program::Inputs::set_block(std::string_view name, int rank, std::span<const float> values) {
  blocks.bind(kInputs, name, rank, kNumDevices, values.data(), values.size(), "f32", "Inputs::set_block", kProgram);
  return *this;
}

Program::Inputs& Program::Inputs::set_block(std::string_view name, int rank, std::span<const int32_t> values) {
  blocks.bind(kInputs, name, rank, kNumDevices, values.data(), values.size(), "i32", "Inputs::set_block", kProgram);
  return *this;
}

Program::Outputs& Program::Outputs::set_block(std::string_view name, int rank, std::span<float> values) {
  blocks.bind(kOutputs, name, rank, kNumDevices, values.data(), values.size(), "f32", "Outputs::set_block",
              kProgram);
  return *this;
}

Program::Outputs& Program::Outputs::set(std::string_view name,
                                        [[maybe_unused]] std::span<float> values) {
@SHARC_OUTPUTS_SET@
  output_info(name);  // throws: no such output
  return *this;
}

void Program::forward(const Inputs& in, Outputs& out) {
@SHARC_IO_CHECKS@
  out.blocks.clear_marks(kOutputs.size(), kNumDevices);
  world_.run([&](int rank) { forward_device(rank, in, out); });
  if (world_.processes() == 1) return;
  // Several processes: each global output array gets the blocks computed
  // on the other processes.
@SHARC_COMPLETE_OUTPUTS@
}

// The SPMD body: the same statements on every device.
void Program::forward_device(int rank, [[maybe_unused]] const Inputs& in,
                             [[maybe_unused]] Outputs& out) {
  [[maybe_unused]] Device& dev = *devices_[rank];
  [[maybe_unused]] rt::Communicator& comm = world_.comm(rank);
  [[maybe_unused]] rt::DeviceMemory& mem = world_.memory(rank);
  // The step's buffers come from the device's arena, reserved in the
  // constructor; buffers that outlive the step (new parameter values) do not.
  rt::StepArena step_arena(mem);
  // Each statement is marked on the device's timeline: a trace event on the
  // wall clock, its modelled cost on the virtual one; one branch when the
  // world's clock is off (rt::ThreadWorld::set_clock).
  [[maybe_unused]] rt::Timeline& timeline = world_.timeline(rank);
@SHARC_FORWARD_BODY@
}  // Program::forward_device@SHARC_STEP_PARTS@

const Program::Device& Program::device(int rank, std::string_view call) const {
  if (rank >= 0 && rank < kNumDevices && devices_[rank]) return *devices_[rank];
  std::string local;
  for (int r : local_ranks_) local += (local.empty() ? "" : ", ") + std::to_string(r);
  throw std::out_of_range(std::string(call) + ": device " + std::to_string(rank) + " is not one of this process's (" +
                          "process " + std::to_string(world_.process()) + " of " + std::to_string(world_.processes()) +
                          " drives " + local + ")");
}

bool Program::holds_parameter([[maybe_unused]] int rank, std::string_view path) {
@SHARC_HOLDS_PARAMETER@
  parameter_info(path);  // throws std::out_of_range: no such parameter
  return false;
}

const float* Program::parameter_shard(int rank, std::string_view path) const {
  [[maybe_unused]] const Device& dev = device(rank, "parameter_shard");
@SHARC_PARAMETER_SHARD@
  parameter_info(path);  // throws std::out_of_range: no such parameter
  return nullptr;
}

size_t Program::parameter_shard_size(std::string_view path) const {
@SHARC_PARAMETER_SHARD_SIZE@
  parameter_info(path);  // throws std::out_of_range: no such parameter
  return 0;
}

void Program::set_parameter(std::string_view path, std::span<const float> values) {
  sharc::rt::check_elements(parameter_info(path), values.size(), "set_parameter", "parameter");
  [[maybe_unused]] const float* global = values.data();
  for (int rank : local_ranks_) {
    [[maybe_unused]] Device& dev = *devices_[rank];
@SHARC_SET_PARAMETER@
  }
}

void Program::get_parameter(std::string_view path, std::span<float> values) const {
  sharc::rt::check_elements(parameter_info(path), values.size(), "get_parameter", "parameter");
  [[maybe_unused]] float* global = values.data();
  std::vector<uint8_t> wrote(kNumDevices, 0);  // the devices that wrote their block
  for (int rank : local_ranks_) {
    [[maybe_unused]] const Device& dev = *devices_[rank];
@SHARC_GET_PARAMETER@
  }
  rt::complete_global(world_, parameter_info(path), values, wrote);  // other processes' blocks
}

}  // namespace @SHARC_NAMESPACE@
