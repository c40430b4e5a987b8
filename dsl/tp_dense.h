// Tensor-parallel dense layers written with shard_map (DistJax's TPDense and
// TPAsyncDense): the communication is spelled out per device instead of being
// left to the partitioner. Both compute x @ kernel + bias for x (..., in) and
// keep the parameters at the same paths and with the same initialisers as
// Linear (kernel (in, out), bias (out)), so a model can switch between them
// and the automatic path and get the same weights.
//
// Layouts (`axis` the tensor-parallel mesh axis, `batch_axis` optional on
// the leading dimension of x and y):
//
//   mode      x (..., in)        kernel (in, out)   y (..., out)     per device
//   kGather   P(batch, .., axis) P(None, axis)      P(batch, .., axis) all_gather x, dense
//   kScatter  P(batch, .., axis) P(axis, None)      P(batch, .., axis) dense, psum_scatter
//   kNone     P(batch, .., None) P(None, axis)      P(batch, .., axis) dense
//
// TPAsyncDense has kGather's layouts but never gathers x: its block travels
// the ring with ppermute (to position p + 1) while each of the n steps
// multiplies the block it holds, block (p - k) mod n, with the matching rows
// of the local kernel, selected with axis_index arithmetic; n - 1 transfers
// of one block, the all_gather's bytes.
#pragma once

#include <optional>
#include <string>

#include "dsl/module.h"
#include "dsl/shard_map.h"

namespace sharc {

// How a TPDense communicates (the table above): all_gather its input's
// feature blocks, psum_scatter its partial products, or neither.
enum class TPMode { kGather, kScatter, kNone };

// A TPDense's axes, mode and parameters.
struct TPDenseOptions {
  std::string axis = "model";             // the tensor-parallel mesh axis
  std::optional<std::string> batch_axis;  // e.g. "data"
  TPMode mode = TPMode::kGather;          // the communication (TPAsyncDense: always kGather's layouts)
  // Its sharding, if any, is replaced by the mode's kernel layout.
  Initializer kernel_init = lecun_normal();
  Initializer bias_init = zeros();  // the bias's initializer; it is split over `axis`
  bool use_bias = true;             // false: no bias parameter
};

// x @ kernel + bias with the communication spelled out per device in a
// shard_map (DistJax's TPDense), in one of the TPMode layouts.
class TPDense : public Module {
 public:
  // Makes the parameters `kernel` (in_features, out_features) and `bias`
  // (out_features) under scope `s`, laid out for `options.mode`.
  TPDense(Scope s, int64_t in_features, int64_t out_features, TPDenseOptions options = {},
          SrcLoc loc = Here::current());
  // The layer on x (..., in_features) laid out as x_spec() says; the result
  // is laid out as y_spec() says.
  Tensor operator()(Tensor x, SrcLoc loc = Here::current()) const;
  Param kernel;  // (in_features, out_features)
  Param bias;    // (out_features); empty without use_bias

  // The specs of x, kernel, bias and y for `mode` and x of rank `rank`.
  //@{
  static P x_spec(const TPDenseOptions& o, size_t rank);
  static P kernel_spec(const TPDenseOptions& o);
  static P y_spec(const TPDenseOptions& o, size_t rank);
  //@}

 protected:
  std::string path_;         // the scope's path, which labels the layer's nodes
  TPDenseOptions o_;         // as given, the kernel's layout set by the mode
  int64_t in_ = 0;           // in_features
  int64_t out_ = 0;          // out_features
};

// TPDense in kGather's layouts that never gathers x (DistJax's TPAsyncDense):
// x's feature blocks travel the ring with ppermute while each device
// multiplies the block it holds; `mode` is ignored.
class TPAsyncDense : public TPDense {
 public:
  // As TPDense's, in kGather's layouts.
  TPAsyncDense(Scope s, int64_t in_features, int64_t out_features, TPDenseOptions options = {},
               SrcLoc loc = Here::current());
  // The layer on x (..., in_features), as TPDense's kGather computes it.
  Tensor operator()(Tensor x, SrcLoc loc = Here::current()) const;
};

}  // namespace sharc
