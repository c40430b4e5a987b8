@SHARC_BANNER@
//
// The program's private header: the per-device state (Program::Device) and the
// struct of one step on one device (Program::Step: its buffers, and its parts
// as member functions). @SHARC_SOURCE_NAME@ and the part files include it;
// users include @SHARC_HEADER_NAME@ and never this one.
//
// The fixed text comes from templates/program_step.h; codegen/emit_cpu.cpp
// fills in the program-specific parts.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "@SHARC_HEADER_NAME@"
#include "runtime/communicator.h"
#include "runtime/elementwise.h"
#include "runtime/init.h"
#include "runtime/kernels.h"
#include "runtime/memory.h"
#include "runtime/philox.h"
#include "runtime/team.h"
#include "runtime/tensor_collectives.h"@SHARC_BACKEND_INCLUDES@

namespace @SHARC_NAMESPACE@ {

namespace rt = sharc::rt;@SHARC_BACKEND_ALIASES@

struct Program::Device {
@SHARC_DEVICE_FIELDS@
};  // struct Program::Device

@SHARC_STEP_STRUCT@

}  // namespace @SHARC_NAMESPACE@
