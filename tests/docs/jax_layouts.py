#!/usr/bin/env python3
"""The JAX side of docs/guide/from-jax.md: the Flax NNX guide's examples
written in plain JAX (sharc's own code, after the guide) and Scalax's FSDP
rule run by Scalax itself (pip's scalax), on 8 fake CPU devices,
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


def record():
    devices = np.array(jax.devices()[:8]).reshape(2, 4)
    mesh = Mesh(devices, ("data", "model"))
    fsdp4 = Mesh(np.array(jax.devices()[:4]), ("fsdp",))
    return {
        # examples/own_project's regressor: y = head(gelu(hidden(x))),
        # 32 features, 64 hidden, 1 output, FSDP over 4 devices for every
        # weight of at least 256 elements.
        "scalax_fsdp_regressor": {
            "mesh": "fsdp=4",
            "tensors": scalax_fsdp(fsdp4, {"hidden/kernel": (32, 64), "hidden/bias": (64,),
                                           "head/kernel": (64, 1), "head/bias": (1,)}, min_fsdp_size=256),
        },
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
