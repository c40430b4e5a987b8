"""The JAX side of bench_vs_jax: sharc's MLP classifier and GPT sample written
in JAX, one training step each, jitted over a named mesh of fake CPU devices
with the parameter layouts sharc chose for the same mesh.

Run as a subprocess by bench_vs_jax.py (it sets XLA_FLAGS before JAX is
imported, so the device count is fixed per process). Input on stdin: one
JSON object (model, mesh axes, parameter and input tables as the sharc bench
printed them, steps, warm-up, timed windows); output on stdout: one JSON object (examples/s,
collective bytes per device read from the compiled HLO, XLA's memory
analysis, the last loss).

The models follow sharc's definitions (samples/mlp_classifier/model.h,
dsl/transformer.cpp, dsl/train.cpp) op for op: the same shapes, the same
loss, the same AdamW (optax semantics: bias-corrected, eps outside the sqrt,
decoupled weight decay scaled by the learning rate), the same warm-up cosine
schedule, global-norm clipping where sharc clips, and the global norm as an
output in every step, as sharc's train_step computes it.
"""

import json
import math
import re
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

# ----------------------------------------------------------------------------
# Optimizer: optax's adamw + warmup_cosine_decay_schedule + clip_by_global_norm,
# written out so that nothing but JAX itself is needed.


def warmup_cosine(step, peak, warmup, decay_steps, end):
    step = step.astype(jnp.float32)
    warm = peak * step / max(warmup, 1)
    frac = jnp.clip((step - warmup) / max(decay_steps - warmup, 1), 0.0, 1.0)
    cos = end + (peak - end) * 0.5 * (1.0 + jnp.cos(math.pi * frac))
    return jnp.where(step < warmup, warm, cos)


def adamw_step(params, grads, m, v, step, opt):
    sq = sum(jnp.sum(g * g) for g in jax.tree_util.tree_leaves(grads))
    norm = jnp.sqrt(sq)
    if opt.get("clip") is not None:
        factor = jnp.minimum(1.0, opt["clip"] / jnp.maximum(norm, 1e-30))
        grads = jax.tree_util.tree_map(lambda g: g * factor, grads)
    lr = warmup_cosine(step, opt["peak"], opt["warmup"], opt["decay_steps"], opt["end"])
    count = step.astype(jnp.float32) + 1.0
    b1, b2, eps, wd = 0.9, 0.999, 1e-8, opt["weight_decay"]
    bc1 = 1.0 - b1**count
    bc2 = 1.0 - b2**count
    new_m = jax.tree_util.tree_map(lambda m_, g: b1 * m_ + (1 - b1) * g, m, grads)
    new_v = jax.tree_util.tree_map(lambda v_, g: b2 * v_ + (1 - b2) * g * g, v, grads)

    def update(w, m_, v_):
        u = (m_ / bc1) / (jnp.sqrt(v_ / bc2) + eps) + wd * w
        return w - lr * u

    new_params = jax.tree_util.tree_map(update, params, new_m, new_v)
    return new_params, new_m, new_v, step + 1, norm, lr


def softmax_cross_entropy(logits, labels):
    labels = labels.astype(jnp.int32)
    lse = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    return jnp.mean(lse - picked)


# ----------------------------------------------------------------------------
# The MLP classifier (samples/mlp_classifier/model.h): 784 -> 512 -> 512 -> 10.


def mlp_loss(params, images, labels):
    x = jax.nn.relu(images @ params["dense1/kernel"] + params["dense1/bias"])
    x = jax.nn.relu(x @ params["dense2/kernel"] + params["dense2/bias"])
    logits = x @ params["dense3/kernel"] + params["dense3/bias"]
    best = logits == jnp.max(logits, axis=-1, keepdims=True)
    hit = jnp.sum(best * jax.nn.one_hot(labels.astype(jnp.int32), logits.shape[-1]), axis=-1)
    accuracy = jnp.mean(jnp.minimum(hit, 1.0))
    return softmax_cross_entropy(logits, labels), accuracy


MLP_OPT = dict(peak=2e-3, warmup=20, decay_steps=600, end=1e-4, weight_decay=1e-4, clip=None)

# ----------------------------------------------------------------------------
# The GPT sample (samples/gpt2/model.h, dsl/transformer.cpp): pre-LayerNorm
# blocks, head-major fused QKV columns, tied embeddings, tanh GELU, dropout
# 0.1 on embeddings, attention weights and both residual branches.

GPT_OPT = dict(peak=3e-3, warmup=20, decay_steps=600, end=3e-4, weight_decay=1e-2, clip=1.0)


def layer_norm(x, scale, bias, eps=1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * scale + bias


def dropout(x, rate, key):
    keep = jax.random.uniform(key, x.shape) > rate
    return x * keep.astype(x.dtype) * (1.0 / (1.0 - rate))


def gpt_block(x, p, keys, cfg, fused_sharding, future):
    """One transformer block; p maps "ln1/scale", ... to this layer's values
    and keys holds its three dropout keys."""
    rate = cfg["dropout"]
    E, H = cfg["embed"], cfg["heads"]
    B, T, _ = x.shape
    D = E // H
    h = layer_norm(x, p["ln1/scale"], p["ln1/bias"])
    # sharc's fused QKV columns are head-major: (head, {q, k, v}, head_dim).
    fused = (h @ p["attn/qkv/kernel"] + p["attn/qkv/bias"]).reshape(B, T, H, 3 * D)
    fused = jax.lax.with_sharding_constraint(fused, fused_sharding)
    q = jnp.transpose(fused[..., :D], (0, 2, 1, 3)) * (1.0 / math.sqrt(D))
    k_t = jnp.transpose(fused[..., D:2 * D], (0, 2, 3, 1))
    v = jnp.transpose(fused[..., 2 * D:], (0, 2, 1, 3))
    scores = q @ k_t + future * -1e9
    w = dropout(jax.nn.softmax(scores, axis=-1), rate, keys[0])
    y = jnp.transpose(w @ v, (0, 2, 1, 3)).reshape(B, T, E)
    y = y @ p["attn/proj/kernel"] + p["attn/proj/bias"]
    x = x + dropout(y, rate, keys[1])
    h = layer_norm(x, p["ln2/scale"], p["ln2/bias"])
    h = jax.nn.gelu(h @ p["mlp/fc/kernel"] + p["mlp/fc/bias"], approximate=True)
    h = h @ p["mlp/proj/kernel"] + p["mlp/proj/bias"]
    return x + dropout(h, rate, keys[2])


def gpt_loss(params, tokens, targets, seed, cfg, fused_sharding):
    """The GPT sample's loss. Its blocks' parameters are stacked under "h/"
    (leading axis: the layer), as sharc's scanned GPT holds them, and the
    blocks run as a jax.lax.scan, as sharc runs them; parameters named
    "h0/", "h1/", ... (sharc's unrolled form before the scan) run unrolled."""
    rate = cfg["dropout"]
    L = cfg["layers"]
    key = jax.random.key(seed.astype(jnp.uint32))
    embed_key, layers_key = jax.random.split(key)
    layer_keys = jax.random.split(layers_key, 3 * L).reshape(L, 3)
    B, T = tokens.shape
    wte = params["wte/embedding"]
    x = jax.nn.one_hot(tokens.astype(jnp.int32), cfg["vocab"]) @ wte
    x = x + params["wpe/embedding"][:T]
    x = dropout(x, rate, embed_key)
    future = jnp.arange(T)[None, :] > jnp.arange(T)[:, None]
    if "h/ln1/scale" in params:
        stacked = {k[2:]: v for k, v in params.items() if k.startswith("h/")}

        def body(x, layer):
            p, keys = layer
            return gpt_block(x, p, keys, cfg, fused_sharding, future), None

        x, _ = jax.lax.scan(body, x, (stacked, layer_keys))
    else:
        for i in range(L):
            p = {k[len(f"h{i}/"):]: v for k, v in params.items() if k.startswith(f"h{i}/")}
            x = gpt_block(x, p, layer_keys[i], cfg, fused_sharding, future)
    x = layer_norm(x, params["ln_f/scale"], params["ln_f/bias"])
    logits = x @ wte.T
    return softmax_cross_entropy(logits, targets)


# ----------------------------------------------------------------------------
# Collective bytes per device from the compiled HLO, counted as sharc's ring
# collectives count them (runtime/ring_comm.cpp): an all-reduce of S bytes
# over n devices sends 2(n-1)/n S, an all-gather (n-1)/n of its result, a
# reduce-scatter (n-1)/n of its operand, an all-to-all (n-1)/n of its
# operand, a collective-permute its operand (on the devices that send). A
# tuple all-reduce counts every operand. A collective inside a while loop's
# body (a scanned model's per-layer gradient all-reduce) runs once per trip:
# it counts as many times as the loop's known_trip_count says, through
# nested loops and calls.

_DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "pred": 1, "s8": 1, "u8": 1,
                "f64": 8, "s64": 8, "u64": 8}
_ARRAY = re.compile(r"\b(f32|bf16|f16|s32|u32|pred|s8|u8|f64|s64|u64)\[([0-9,]*)\]")
_COLLECTIVE = re.compile(
    r"=\s*(.*?)\s(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)"
    r"(-start)?\(")


def _array_bytes(text):
    total = 0
    for dtype, dims in _ARRAY.findall(text):
        n = 1
        for d in dims.split(","):
            if d:
                n *= int(d)
        total += n * _DTYPE_BYTES[dtype]
    return total


def _group_size(line, devices):
    m = re.search(r"replica_groups=\{(\{[0-9,]*\}(?:,\{[0-9,]*\})*)\}", line)
    if m:
        first = m.group(1).split("}")[0].strip("{")
        return len([x for x in first.split(",") if x]) or devices
    m = re.search(r"replica_groups=\[([0-9,]+)\]<=", line)
    if m:
        return int(m.group(1).split(",")[-1])
    return devices


_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%([^\s(]+)\s*\(")
_WHILE_BODY = re.compile(r"\swhile\(.*?body=%([^\s,]+)")
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"([0-9]+)"\}')
_CALLS = re.compile(r"\scalls=%([^\s,]+)")


def _runs_per_step(hlo_text):
    """How many times each computation runs in one execution of the entry
    computation: while bodies their trip count times their caller's, called
    computations their caller's. Computations not reached: once."""
    lines_of, entry, current = {}, None, None
    for line in hlo_text.splitlines():
        m = _COMPUTATION.match(line)
        if m and line.rstrip().endswith("{"):
            current = m.group(1)
            lines_of[current] = []
            if line.startswith("ENTRY"):
                entry = current
        elif current is not None:
            lines_of[current].append(line)
    runs = {entry: 1} if entry else {}
    todo = [entry] if entry else []
    while todo:
        c = todo.pop()
        for line in lines_of.get(c, []):
            callee, times = None, 1
            m = _WHILE_BODY.search(line)
            if m:
                callee = m.group(1)
                t = _TRIP_COUNT.search(line)
                times = int(t.group(1)) if t else 1
            else:
                m = _CALLS.search(line)
                if m:
                    callee = m.group(1)
            if callee and callee in lines_of:
                n = runs[c] * times
                if runs.get(callee, 0) < n:
                    runs[callee] = n
                    todo.append(callee)
    return lines_of, runs


def collective_bytes(hlo_text, devices):
    """Per kind: calls and bytes sent per device in one step."""
    kinds = {}
    lines_of, runs = _runs_per_step(hlo_text)
    for computation, lines in lines_of.items():
        times = runs.get(computation, 1)
        for line in lines:
            _count(line, devices, times, kinds)
    return kinds


def _count(line, devices, times, kinds):
    """Adds the collective on `line`, if any, run `times` times, to kinds."""
    m = _COLLECTIVE.search(line)
    if not m:
        return
    result, kind = m.group(1), m.group(2)
    operands = line[m.end():]
    n = _group_size(line, devices)
    if kind == "all-reduce":
        sent = 2.0 * (n - 1) / n * _array_bytes(result)
    elif kind == "all-gather":
        # An async start's result is (operand, output): count the output.
        arrays = _ARRAY.findall(result)
        out = _array_bytes("%s[%s]" % arrays[-1]) if arrays else 0
        sent = (n - 1) / n * out
    elif kind == "collective-permute":
        sent = _array_bytes(operands.split(")")[0])
    else:  # reduce-scatter, all-to-all: of the operands
        sent = (n - 1) / n * _array_bytes(operands.split("), ")[0])
    k = kinds.setdefault(kind, {"calls": 0, "bytes": 0.0})
    k["calls"] += times
    k["bytes"] += sent * times


# ----------------------------------------------------------------------------


def run(req):
    axes = req["axes"]  # [[name, size], ...]
    names = tuple(a for a, _ in axes)
    sizes = tuple(s for _, s in axes)
    ndev = int(np.prod(sizes))
    devices = np.array(jax.devices()[:ndev]).reshape(sizes)
    mesh = Mesh(devices, names)

    def spec(s):
        return P(*[tuple(d) if len(d) > 1 else (d[0] if d else None) for d in s])

    rng = np.random.default_rng(0)
    params, pshard = {}, {}
    for t in req["parameters"]:
        if t["name"].startswith("opt/"):
            continue
        sh = NamedSharding(mesh, spec(t["spec"]))
        shape = tuple(t["shape"])
        if t["name"].endswith("/scale"):
            value = np.ones(shape, np.float32)
        elif t["name"].endswith("/bias"):
            value = np.zeros(shape, np.float32)
        else:
            value = (rng.standard_normal(shape) * 0.02).astype(np.float32)
        params[t["name"]] = jax.device_put(value, sh)
        pshard[t["name"]] = sh
    zeros = {k: jax.device_put(jnp.zeros_like(v), pshard[k]) for k, v in params.items()}
    m, v = zeros, {k: jax.device_put(jnp.zeros_like(x), pshard[k]) for k, x in params.items()}
    replicated = NamedSharding(mesh, P())
    step = jax.device_put(jnp.zeros((), jnp.int32), replicated)

    inputs = {t["name"]: t for t in req["inputs"]}
    batch_spec = inputs[next(iter(inputs))]["spec"][0]
    batch_axes = tuple(batch_spec) if len(batch_spec) > 1 else (batch_spec[0] if batch_spec else None)
    model_axis = "model" if "model" in names else None
    ishard = {k: NamedSharding(mesh, spec(t["spec"])) for k, t in inputs.items()}

    if req["model"] == "mlp":
        B, F = inputs["images"]["shape"]
        batches = []
        for i in range(8):
            x = rng.uniform(-1, 1, (B, F)).astype(np.float32)
            y = rng.integers(0, 10, (B,)).astype(np.float32)
            batches.append((jax.device_put(x, ishard["images"]), jax.device_put(y, ishard["labels"])))
        opt = MLP_OPT

        def train(params, m, v, step, images, labels):
            (loss, acc), grads = jax.value_and_grad(mlp_loss, has_aux=True)(params, images, labels)
            params, m, v, step, norm, lr = adamw_step(params, grads, m, v, step, opt)
            return params, m, v, step, loss, norm, lr, acc

        examples = B
    else:
        cfg = req["config"]
        B, T = inputs["tokens"]["shape"]
        batches = []
        for i in range(8):
            tok = rng.integers(0, cfg["vocab"], (B, T)).astype(np.float32)
            tgt = rng.integers(0, cfg["vocab"], (B, T)).astype(np.float32)
            batches.append((jax.device_put(tok, ishard["tokens"]),
                            jax.device_put(tgt, ishard["targets"])))
        opt = GPT_OPT
        # sharc's constraint on the fused QKV activations (dsl/transformer.cpp).
        fused_sharding = NamedSharding(mesh, P(batch_axes, None, model_axis, None))

        def train(params, m, v, step, tokens, targets):
            seed = step  # a fresh dropout key every step, as sharc's driver passes one
            loss, grads = jax.value_and_grad(gpt_loss)(params, tokens, targets, seed, cfg,
                                                       fused_sharding)
            params, m, v, step, norm, lr = adamw_step(params, grads, m, v, step, opt)
            return params, m, v, step, loss, norm, lr

        examples = B  # sequences; the driver reports tokens too

    in_sh = (pshard, pshard, pshard, replicated, ishard[list(inputs)[0]], ishard[list(inputs)[1]])
    scalars = 4 if req["model"] == "mlp" else 3  # loss, norm, lr (, accuracy)
    out_sh = (pshard, pshard, pshard, replicated) + (replicated,) * scalars
    fn = jax.jit(train, in_shardings=in_sh, out_shardings=out_sh, donate_argnums=(0, 1, 2, 3))
    compiled = fn.lower(params, m, v, step, *batches[0]).compile()
    hlo = compiled.as_text()
    mem = compiled.memory_analysis()

    state = (params, m, v, step)
    out = None

    def one(i):
        nonlocal state, out
        res = compiled(*state, *batches[i % len(batches)])
        state = res[:4]
        out = res

    for i in range(req["warmup"]):
        one(i)
    jax.block_until_ready(out)
    # Windows of `steps` steps; the fastest gives the step time, as in
    # bench/timed_steps.h.
    step_s, done = None, 0
    for _ in range(req.get("windows", 1)):
        t0 = time.perf_counter()
        for i in range(req["steps"]):
            one(req["warmup"] + done + i)
        jax.block_until_ready(out)
        wall = (time.perf_counter() - t0) / req["steps"]
        step_s = wall if step_s is None else min(step_s, wall)
        done += req["steps"]
    kinds = collective_bytes(hlo, ndev)
    memory = None
    if mem is not None:
        memory = dict(argument=mem.argument_size_in_bytes, output=mem.output_size_in_bytes,
                      alias=mem.alias_size_in_bytes, temp=mem.temp_size_in_bytes,
                      total=mem.argument_size_in_bytes + mem.output_size_in_bytes
                      - mem.alias_size_in_bytes + mem.temp_size_in_bytes)
    return dict(step_s=step_s, examples_per_s=examples / step_s,
                loss=float(out[4]), collectives=kinds,
                bytes_per_device=sum(k["bytes"] for k in kinds.values()), memory=memory,
                jax_version=jax.__version__, devices=len(jax.devices()))


if __name__ == "__main__":
    request = json.load(sys.stdin)
    json.dump(run(request), sys.stdout)
    sys.stdout.write("\n")
