#!/usr/bin/env python3
"""The JAX side of docs/guide/from-jax.md: the Flax NNX guide's examples
written in plain JAX (sharc's own code, after the guide), Scalax's FSDP and
path rules run by Scalax itself (pip's scalax), and DistJax's
tensor-parallel block and pipeline classifier written as DistJax writes them
(shard_map with explicit collectives; sharc's own code), on 8 fake CPU devices,
and the layout JAX gives every parameter and output (its PartitionSpec,
padded with None to the tensor's rank and printed as sharc's
TensorInfo::spec_str prints one, and the shape of device 0's block).

  jax_layouts.py > tests/docs/jax_layouts.json      record (once, by hand)
  jax_layouts.py --check tests/docs/jax_layouts.json  ctest: still the same

tests/docs/from_jax_test.cpp compares the recorded layouts with the tables
of sharc's programs for the same models and meshes.
"""
import json
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

DEPTH, BATCH = 1024, 8


def spec_str(spec, rank):
    """PartitionSpec('data',) of a rank-2 value -> "P('data', None)"."""
    dims = list(spec) + [None] * (rank - len(spec))
    out = []
    for d in dims:
        if d is None:
            out.append("None")
        elif isinstance(d, tuple):
            out.append("(" + ", ".join(f"'{a}'" for a in d) + ")")
        else:
            out.append(f"'{d}'")
    single = len(dims) == 1 and isinstance(dims[0], tuple)
    return "P(" + ", ".join(out) + (",)" if single else ")")


def layout(array):
    return {"spec": spec_str(array.sharding.spec, array.ndim),
            "local_shape": list(array.addressable_shards[0].data.shape)}


def dot_relu_dot(mesh, kernel_spec, w2_spec, constraint):
    """relu(x @ dot1/kernel), constrained, @ w2: the guide's DotReluDot."""
    put = lambda shape, spec: jax.device_put(jnp.ones(shape, jnp.float32), NamedSharding(mesh, spec))
    params = {"dot1/kernel": put((DEPTH, DEPTH), kernel_spec), "w2": put((DEPTH, DEPTH), w2_spec)}
    x = put((BATCH, DEPTH), P("data", None))

    def forward(params, x):
        y = jax.nn.relu(x @ params["dot1/kernel"])
        y = jax.lax.with_sharding_constraint(y, NamedSharding(mesh, constraint))
        return y @ params["w2"]

    y = jax.jit(forward)(params, x)
    out = {name: layout(a) for name, a in params.items()}
    out["y"] = layout(y)
    return out


# The guide's logical names and their rules: a logical spec becomes a mesh
# spec by looking each name up (None stays None).
LOGICAL_RULES = {"batch": "data", "hidden": "model", "embed": None}


def logical(*names):
    return P(*(LOGICAL_RULES[n] if n is not None else None for n in names))


def scalax_fsdp(mesh, shapes, min_fsdp_size):
    """Scalax's bare FSDPShardingRule (no axis size given: it shards the
    dimension with the largest power-of-two divisor) on a parameter tree."""
    from scalax.sharding import FSDPShardingRule
    tree = {}  # "hidden/kernel" -> tree["hidden"]["kernel"]
    for path, shape in shapes.items():
        layer, leaf = path.split("/")
        tree.setdefault(layer, {})[leaf] = jnp.ones(shape, jnp.float32)
    specs = FSDPShardingRule("fsdp", min_fsdp_size=min_fsdp_size).apply(tree)
    return {f"{layer}/{leaf}": layout(jax.device_put(value, NamedSharding(mesh, specs[layer][leaf])))
            for layer, leaves in tree.items() for leaf, value in leaves.items()}


def scalax_path_rules(mesh, shapes, rules):
    """Scalax's TreePathShardingRule (strict) on a parameter tree."""
    from scalax.sharding import TreePathShardingRule
    tree = {}
    for path, shape in shapes.items():
        layer, leaf = path.split("/")
        tree.setdefault(layer, {})[leaf] = jnp.ones(shape, jnp.float32)
    specs = TreePathShardingRule(*rules).apply(tree)
    return {f"{layer}/{leaf}": layout(jax.device_put(value, NamedSharding(mesh, specs[layer][leaf])))
            for layer, leaves in tree.items() for leaf, value in leaves.items()}


def distjax_tp_mlp_block(mesh, batch=16, features=64, hidden=256):
    """DistJax's tensor-parallel MLP block: the up projection asynchronous
    (x's feature blocks go round the 'tensor' ring with ppermute while each
    device multiplies the block it holds by the matching kernel rows), relu,
    the down projection in scatter mode (partial products, psum_scatter).
    x and y are split on their features over 'tensor'."""
    n = mesh.shape["tensor"]
    specs = {"up/kernel": P(None, "tensor"), "up/bias": P("tensor"),
             "down/kernel": P("tensor", None), "down/bias": P("tensor")}
    shapes = {"up/kernel": (features, hidden), "up/bias": (hidden,),
              "down/kernel": (hidden, features), "down/bias": (features,)}
    params = {k: jax.device_put(jnp.ones(shapes[k], jnp.float32), NamedSharding(mesh, specs[k])) for k in specs}
    x = jax.device_put(jnp.ones((batch, features), jnp.float32), NamedSharding(mesh, P("data", "tensor")))

    def block(p, x):
        piece = x.shape[-1]
        me = jax.lax.axis_index("tensor")
        acc = jnp.zeros((x.shape[0], p["up/kernel"].shape[1]), x.dtype)
        for step in range(n):
            rows = jax.lax.dynamic_slice_in_dim(p["up/kernel"], ((me - step) % n) * piece, piece, 0)
            if step + 1 < n:
                nxt = jax.lax.ppermute(x, "tensor", [(j, (j + 1) % n) for j in range(n)])
            acc = acc + x @ rows
            if step + 1 < n:
                x = nxt
        h = jax.nn.relu(acc + p["up/bias"])
        y = jax.lax.psum_scatter(h @ p["down/kernel"], "tensor", scatter_dimension=1, tiled=True)
        return y + p["down/bias"]

    y = jax.jit(jax.shard_map(block, mesh=mesh, in_specs=(specs, P("data", "tensor")),
                          out_specs=P("data", "tensor")))(params, x)
    out = {k: layout(a) for k, a in params.items()}
    out["y"] = layout(y)
    return out


def distjax_pp_classifier(mesh, batch=32, features=32, hidden=64, classes=10, layers=8, micro=4):
    """DistJax's pipeline classifier: an input layer, `layers` dense layers
    stacked per stage along a leading dimension split over 'pipe' (each stage
    holds layers/stages of them), a classifier head; micro-batches pass from
    stage to stage with ppermute (GPipe), and the loss's gradient is taken
    through it all. A stacked parameter is recorded once per stage under the
    name sharc gives that layer ("layers_<l>/kernel"), with the stage's
    block and the devices holding it."""
    stages = mesh.shape["pipe"]
    per_stage = layers // stages
    put = lambda shape, spec: jax.device_put(jnp.full(shape, 0.01, jnp.float32), NamedSharding(mesh, spec))
    params = {"input_dense/kernel": put((features, hidden), P()), "input_dense/bias": put((hidden,), P()),
              "output_dense/kernel": put((hidden, classes), P()), "output_dense/bias": put((classes,), P())}
    for j in range(per_stage):
        params[f"stage/layers_{j}/kernel"] = put((stages, hidden, hidden), P("pipe"))
        params[f"stage/layers_{j}/bias"] = put((stages, hidden), P("pipe"))
    specs = {k: a.sharding.spec for k, a in params.items()}
    images = put((batch, features), P("data"))
    labels = jax.device_put(jnp.zeros((batch,), jnp.int32), NamedSharding(mesh, P("data")))

    def loss_fn(p, images, labels):
        me = jax.lax.axis_index("pipe")
        mbs = images.reshape(micro, -1, features)
        state = jnp.zeros((mbs.shape[1], hidden), images.dtype)
        outputs = jnp.zeros((micro, mbs.shape[1], hidden), images.dtype)
        for t in range(micro + stages - 1):
            if t < micro:  # the first stage takes the next micro-batch in
                fresh = jax.nn.relu(mbs[t] @ p["input_dense/kernel"] + p["input_dense/bias"])
                state = jnp.where(me == 0, fresh, state)
            for j in range(per_stage):
                state = jax.nn.relu(state @ p[f"stage/layers_{j}/kernel"][0] + p[f"stage/layers_{j}/bias"][0])
            done = t - (stages - 1)
            if done >= 0:  # the last stage's result is micro-batch `done`
                outputs = outputs.at[done].set(jnp.where(me == stages - 1, state, 0.0))
            state = jax.lax.ppermute(state, "pipe", [(s, s + 1) for s in range(stages - 1)])
        h = jax.lax.psum(outputs, "pipe").reshape(-1, hidden)
        logits = h @ p["output_dense/kernel"] + p["output_dense/bias"]
        loss = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1))
        return jax.lax.pmean(loss, "data")

    step = jax.shard_map(jax.value_and_grad(loss_fn), mesh=mesh, in_specs=(specs, P("data"), P("data")),
                     out_specs=(P(), specs), check_vma=False)
    loss, grads = jax.jit(step)(params, images, labels)
    assert np.isfinite(float(loss)) and grads.keys() == params.keys()
    out = {}
    for name, a in params.items():
        if not name.startswith("stage/"):
            out[name] = layout(a)
            continue
        j, leaf = name.split("/")[1:]
        block = layout(a)
        index = a.sharding.devices_indices_map(a.shape)
        for s in range(stages):
            holders = sorted(d.id for d, idx in index.items() if (idx[0].start or 0) <= s < (idx[0].stop or stages))
            out[f"layers_{s * per_stage + int(j.split('_')[1])}/{leaf}"] = {
                "spec": spec_str(P(*a.sharding.spec[1:]), a.ndim - 1),
                "local_shape": block["local_shape"][1:], "devices": holders}
    return out


def record():
    devices = np.array(jax.devices()[:8]).reshape(2, 4)
    mesh = Mesh(devices, ("data", "model"))
    fsdp4 = Mesh(np.array(jax.devices()[:4]), ("fsdp",))
    fsdp_model = Mesh(devices, ("fsdp", "model"))
    data_tensor = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "tensor"))
    data_pipe = Mesh(devices, ("data", "pipe"))
    return {
        # examples/own_project's regressor: y = head(gelu(hidden(x))),
        # 32 features, 64 hidden, 1 output, FSDP over 4 devices for every
        # weight of at least 256 elements.
        "scalax_fsdp_regressor": {
            "mesh": "fsdp=4",
            "tensors": scalax_fsdp(fsdp4, {"hidden/kernel": (32, 64), "hidden/bias": (64,),
                                           "head/kernel": (64, 1), "head/bias": (1,)}, min_fsdp_size=256),
        },
        # samples/mlp_classifier's MLP (mlp_train_path_rules): Megatron's
        # split on 'model', the kernels' other dimension on 'fsdp'.
        "scalax_path_rules_mlp": {
            "mesh": "fsdp=2,model=4",
            "tensors": scalax_path_rules(
                fsdp_model, {"dense1/kernel": (784, 512), "dense1/bias": (512,), "dense2/kernel": (512, 512),
                             "dense2/bias": (512,), "dense3/kernel": (512, 10), "dense3/bias": (10,)},
                [("dense1/kernel", P("fsdp", "model")), ("dense1/bias", P("model")),
                 ("dense2/kernel", P("model", "fsdp")), ("dense3/kernel", P("fsdp", None)), ("bias", P())]),
        },
        "distjax_tp_mlp_block": {"mesh": "data=4,tensor=2", "tensors": distjax_tp_mlp_block(data_tensor)},
        "distjax_pp_classifier": {"mesh": "data=2,pipe=4", "tensors": distjax_pp_classifier(data_pipe)},
        "flax_dot_relu_dot": {
            "mesh": "data=2,model=4",
            "tensors": dot_relu_dot(mesh, P(None, "model"), P("model", None), P("data", "model")),
        },
        "flax_logical_dot_relu_dot": {
            "mesh": "data=2,model=4",
            "tensors": dot_relu_dot(mesh, logical("embed", "hidden"), logical("hidden", "embed"),
                                    P("data", None)),
        },
    }


def main():
    got = record()
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        with open(sys.argv[2]) as f:
            want = json.load(f)
        if got != want:
            print(f"JAX now gives other layouts than {sys.argv[2]} records:")
            print(json.dumps(got, indent=2, sort_keys=True))
            return 1
        print(f"JAX {jax.__version__} gives the layouts {sys.argv[2]} records "
              f"({sum(len(e['tensors']) for e in got.values())} tensors)")
        return 0
    print(json.dumps(got, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
