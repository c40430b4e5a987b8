// The umbrella header a model file includes.
// defines: Mesh (mesh.h), P/None/axes/LogicalRules (partition_spec.h),
// initializers and with_partitioning/with_metadata (initializers.h), Tensor and
// Tracer (tensor.h), ops (ops.h), Scope/Linear/LayerNorm (module.h),
// ProgramBuilder and SHARC_PROGRAM (program.h), Error (error.h),
// Replicated/FSDPRule/PathRule/ShardingRules (sharding_rules.h),
// Embedding/PositionalEmbedding/CausalSelfAttention/MLPBlock/
// TransformerBlock/GPT and their logical rules (transformer.h), shard_map and
// its per-device collectives (shard_map.h), TPDense/TPAsyncDense (tp_dense.h),
// SHARC_ELEMENTWISE and the lifted functions' runtime (lift.h),
// RMSNorm/rotary_embedding/SwiGLU/GroupedQueryAttention/Llama (llama.h).
#pragma once

#include "ir/error.h"
#include "ir/initializers.h"
#include "ir/mesh.h"
#include "dsl/layers.h"
#include "dsl/lift.h"
#include "dsl/llama.h"
#include "dsl/module.h"
#include "dsl/ops.h"
#include "ir/partition_spec.h"
#include "dsl/program.h"
#include "dsl/shard_map.h"
#include "dsl/sharding_rules.h"
#include "dsl/tensor.h"
#include "dsl/tp_dense.h"
#include "dsl/transformer.h"
