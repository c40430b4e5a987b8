"""The GPT-2 124M training step in PyTorch (torch.compile) and in JAX/XLA:
the peers issue 13 measures sharc against, with its settings (12 layers,
12 heads, d=768, vocab 50304, T=1024, bf16 compute on f32 master weights,
AdamW lr 6e-4 betas (0.9, 0.95) weight decay 0.1, gradients clipped to a
global norm of 1, random tokens). JAX's attention is cuDNN's fused kernel
where JAX has it (its own XLA one otherwise).

For each peer and batch size it prints one line

    peer NAME batch B tokens_per_s X ms_per_step Y mfu Z peak_gib W loss L

with MFU = (6 N + 12 L d T) * tokens/s / 989.4e12 (the H100's dense bf16
peak), N the parameter count. Run it alone,

    python3 bench/gpt2_peers.py --batch 16 32 [--peers torch jax]

or from sharc's GPU benchmark. --tiny shrinks the model (2 layers, d=64,
T=64, vocab 512) so that the script can be checked on a CPU.
A peer whose framework is missing, or that fails, prints
"peer NAME skipped: why" and the others still run.
"""
import argparse
import math
import sys
import time

H100_BF16_PEAK = 989.4e12


class Config:
    def __init__(self, tiny):
        if tiny:
            self.layers, self.heads, self.dim, self.vocab, self.seq = 2, 2, 64, 512, 64
        else:
            self.layers, self.heads, self.dim, self.vocab, self.seq = 12, 12, 768, 50304, 1024

    def params(self):
        C = self.dim
        per_layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C)
        return self.vocab * C + self.seq * C + self.layers * per_layer + 2 * C

    def flops_per_token(self):
        return 6 * self.params() + 12 * self.layers * self.dim * self.seq


def report(name, cfg, batch, step_s, peak_bytes, loss):
    tokens = batch * cfg.seq / step_s
    mfu = cfg.flops_per_token() * tokens / H100_BF16_PEAK
    print(f"peer {name} batch {batch} tokens_per_s {tokens:.0f} ms_per_step {step_s * 1e3:.2f} "
          f"mfu {100 * mfu:.1f}% peak_gib {peak_bytes / 2**30:.2f} loss {loss:.4f}", flush=True)


def run_torch(cfg, batch, steps, warmup):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    C, H = cfg.dim, cfg.heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(cfg.vocab, C), nn.Embedding(cfg.seq, C)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.layers))
            self.ln_f = nn.LayerNorm(C)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for b in self.blocks:
                x = b(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # tied
            return F.cross_entropy(logits.float().view(-1, cfg.vocab), targets.view(-1))

    def init(m):  # GPT-2's: N(0, 0.02) weights, zero biases
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear):
            nn.init.zeros_(m.bias)

    torch.manual_seed(0)
    model = GPT().to(dev)
    model.apply(init)
    assert sum(p.numel() for p in model.parameters()) == cfg.params()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=dev == "cuda")
    cmodel = torch.compile(model)
    idx = torch.randint(0, cfg.vocab, (batch, cfg.seq), device=dev)
    tgt = torch.randint(0, cfg.vocab, (batch, cfg.seq), device=dev)

    def step():
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = cmodel(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(warmup):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    sync()
    step_s = (time.perf_counter() - t0) / steps
    peak = torch.cuda.max_memory_allocated() if dev == "cuda" else 0
    report("torch.compile", cfg, batch, step_s, peak, loss.item())


def run_jax(cfg, batch, steps, warmup):
    import jax
    import jax.numpy as jnp

    C, H, L = cfg.dim, cfg.heads, cfg.layers
    key = jax.random.PRNGKey(0)

    def normal(shape):
        nonlocal key
        key, sub = jax.random.split(key)
        return 0.02 * jax.random.normal(sub, shape, jnp.float32)

    def layer():
        return {"ln1_g": jnp.ones(C), "ln1_b": jnp.zeros(C), "attn_w": normal((C, 3 * C)),
                "attn_b": jnp.zeros(3 * C), "proj_w": normal((C, C)), "proj_b": jnp.zeros(C),
                "ln2_g": jnp.ones(C), "ln2_b": jnp.zeros(C), "fc_w": normal((C, 4 * C)),
                "fc_b": jnp.zeros(4 * C), "fc2_w": normal((4 * C, C)), "fc2_b": jnp.zeros(C)}

    layers = [layer() for _ in range(L)]
    params = {"wte": normal((cfg.vocab, C)), "wpe": normal((cfg.seq, C)),
              "lnf_g": jnp.ones(C), "lnf_b": jnp.zeros(C),
              "layers": jax.tree_util.tree_map(lambda *x: jnp.stack(x), *layers)}
    assert sum(x.size for x in jax.tree_util.tree_leaves(params)) == cfg.params()

    def ln(x, g, b):
        x32 = x.astype(jnp.float32)
        m = x32.mean(-1, keepdims=True)
        v = ((x32 - m) ** 2).mean(-1, keepdims=True)
        return ((x32 - m) * jax.lax.rsqrt(v + 1e-5) * g + b).astype(jnp.bfloat16)

    def attention(q, k, v):
        if hasattr(jax.nn, "dot_product_attention"):
            return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=attention_impl)
        T = q.shape[1]
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / math.sqrt(C // H)
        s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1).astype(q.dtype), v)

    def loss_fn(p, idx, tgt):
        bf = jax.tree_util.tree_map(lambda x: x.astype(jnp.bfloat16), p)
        B, T = idx.shape
        x = bf["wte"][idx] + bf["wpe"][:T]

        def block(x, w):
            qkv = ln(x, w["ln1_g"], w["ln1_b"]) @ w["attn_w"] + w["attn_b"]
            q, k, v = (t.reshape(B, T, H, C // H) for t in jnp.split(qkv, 3, -1))
            x = x + attention(q, k, v).reshape(B, T, C) @ w["proj_w"] + w["proj_b"]
            h = jax.nn.gelu(ln(x, w["ln2_g"], w["ln2_b"]) @ w["fc_w"] + w["fc_b"], approximate=True)
            return x + h @ w["fc2_w"] + w["fc2_b"], None

        x, _ = jax.lax.scan(block, x, bf["layers"])
        logits = (ln(x, bf["lnf_g"], bf["lnf_b"]) @ bf["wte"].T).astype(jnp.float32)
        logp = jax.nn.log_softmax(logits, -1)
        return -jnp.take_along_axis(logp, tgt[..., None], -1).mean()

    b1, b2, eps, lr, wd = 0.9, 0.95, 1e-8, 6e-4, 0.1

    def step_fn(p, m, v, t, idx, tgt):
        loss, g = jax.value_and_grad(loss_fn)(p, idx, tgt)
        norm = jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree_util.tree_leaves(g)))
        g = jax.tree_util.tree_map(lambda x: x * jnp.minimum(1.0, 1.0 / (norm + 1e-6)), g)
        t = t + 1
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        p = jax.tree_util.tree_map(
            lambda p, m, v: p - lr * (m / c1 / (jnp.sqrt(v / c2) + eps) + wd * p), p, m, v)
        return p, m, v, t, loss

    m = jax.tree_util.tree_map(jnp.zeros_like, params)
    v = jax.tree_util.tree_map(jnp.zeros_like, params)
    t = jnp.zeros((), jnp.float32)
    kx, ky = jax.random.split(jax.random.PRNGKey(1))
    idx = jax.random.randint(kx, (batch, cfg.seq), 0, cfg.vocab)
    tgt = jax.random.randint(ky, (batch, cfg.seq), 0, cfg.vocab)
    # cuDNN's fused attention on a GPU; XLA's where cuDNN's is missing.
    attention_impl = None
    step = jax.jit(step_fn, donate_argnums=(0, 1, 2))
    if jax.devices()[0].platform == "gpu":
        try:
            attention_impl = "cudnn"
            step = jax.jit(step_fn, donate_argnums=(0, 1, 2))
            step.lower(params, m, v, t, idx, tgt).compile()
        except Exception as e:  # noqa: BLE001 - any reason to fall back
            print(f"peer jax: cuDNN attention unavailable ({type(e).__name__}), XLA's instead", flush=True)
            attention_impl = None
            step = jax.jit(step_fn, donate_argnums=(0, 1, 2))
    for _ in range(warmup):
        params, m, v, t, loss = step(params, m, v, t, idx, tgt)
    loss.block_until_ready()
    t0 = time.perf_counter()
    for _ in range(steps):
        params, m, v, t, loss = step(params, m, v, t, idx, tgt)
    loss.block_until_ready()
    step_s = (time.perf_counter() - t0) / steps
    stats = jax.devices()[0].memory_stats() or {}
    report("jax", cfg, batch, step_s, stats.get("peak_bytes_in_use", 0), float(loss))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--peers", nargs="+", default=["torch", "jax"], choices=["torch", "jax"])
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    cfg = Config(args.tiny)
    print(f"gpt2 peers: {cfg.params()} parameters, {cfg.flops_per_token() / 1e9:.3f} GFLOP/token",
          flush=True)
    runners = {"torch": ("torch.compile", run_torch), "jax": ("jax", run_jax)}
    for peer in args.peers:
        name, fn = runners[peer]
        for batch in args.batch:
            try:
                fn(cfg, batch, args.steps, args.warmup)
            except Exception as e:  # one failing peer must not hide the others
                print(f"peer {name} skipped: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
