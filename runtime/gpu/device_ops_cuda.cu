// device_ops.h on a CUDA device: the dialect's definitions compiled by nvcc
// (device_ops_sim.cpp compiles them for the block simulator).
#include "runtime/gpu/device_ops_impl.h"
