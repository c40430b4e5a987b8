// A two-layer regressor, y = W2 gelu(W1 x + b1) + b2, trained with AdamW on a
// mean squared error. The model names its dimensions with logical axes only;
// the rules below map them to whatever mesh the build asks for, so
//   data=4          is data parallel (batch on 'data', weights replicated),
//   fsdp=4          is FSDP (batch and the large weights on 'fsdp'),
//   data=2,model=2  is data x tensor parallel (Megatron's MLP split).
#include "dsl/sharc.h"
#include "dsl/train.h"

using namespace sharc;

namespace {

constexpr int64_t kBatch = 32, kFeatures = 32, kHidden = 64;

const LogicalRules kRules = {{"batch", "data"},   {"batch", "fsdp"},
                             {"hidden", "model"}, {"embed", std::nullopt},
                             {"out", std::nullopt}};

struct Regressor : Module {
  Linear hidden, head;
  explicit Regressor(Scope s)
      : hidden(s / "hidden", kFeatures, kHidden,
               {.kernel_init = with_partitioning(lecun_normal(), P("embed", "hidden")),
                .bias_init = with_partitioning(zeros(), P("hidden"))}),
        head(s / "head", kHidden, 1,
             {.kernel_init = with_partitioning(lecun_normal(), P("hidden", "out")),
              .bias_init = with_partitioning(zeros(), P("out"))}) {}
  Tensor operator()(Tensor x) const { return head(gelu(hidden(x))); }
};

}  // namespace

SHARC_PROGRAM(regressor_train, b) {
  b.set_logical_rules(kRules);
  // Scalax's bare FSDPShardingRule(): shard the dimension with the largest
  // power-of-two divisor of every weight of at least 256 elements.
  b.set_sharding_rules({FSDPRule("fsdp", 256, FSDPRule::Dimension::kLargestPowerOfTwo)});
  Regressor model(b.scope());
  Tensor x = b.input("x", {kBatch, kFeatures}, P("batch", None));
  Tensor y = b.input("y", {kBatch, 1}, P("batch", None));
  train_step(
      b, {x, y},
      [&](const std::vector<Tensor>& mb) { return mean_squared_error(model(mb[0]), mb[1]); },
      adamw(Schedule::constant(1e-2), /*weight_decay=*/1e-4), {.clip_global_norm = 1.0});
}
