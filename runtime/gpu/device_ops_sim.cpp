// device_ops.h on the block simulator: the dialect's definitions compiled by
// the host compiler (device_ops_cuda.cu compiles them with nvcc).
#include "runtime/gpu/device_ops_impl.h"
