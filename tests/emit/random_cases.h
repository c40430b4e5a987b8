// The table random_emit writes (random_cases.cpp in the build tree): one entry
// per emitted random program, running the generated code from global inputs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "codegen/interpret.h"
#include "runtime/gpu/gpu_world.h"
#include "runtime/thread_world.h"

struct RandomCase {
  uint64_t seed;
  sharc::HostValues (*run)(const sharc::HostValues& inputs, uint64_t init_seed);
};

const std::vector<RandomCase>& random_cases();
