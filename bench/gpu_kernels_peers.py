"""PyTorch's versions of the kernels bench_gpu_kernels times (GPT-2 124M
shapes, bf16 activations), timed with CUDA events: prints one line
"peer NAME MS" per kernel, NAME as bench_gpu_kernels names it. Run by
`bench_gpu_kernels --peers`; also usable alone:

    python3 bench/gpu_kernels_peers.py --batch 16 --seq 1024

Without torch or a GPU it prints why and exits 0.
"""
import argparse
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"torch is not importable ({e}): no peer numbers")
        return 0
    if not torch.cuda.is_available():
        print("torch sees no CUDA device: no peer numbers")
        return 0
    dev, bf = "cuda", torch.bfloat16
    B, T, C, H, V, L = args.batch, args.seq, 768, 12, 50304, 12
    N, D = B * T, C // H

    def timed(fn):
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / args.iters

    def report(name, ms):
        print(f"peer {name} {ms:.4f}", flush=True)

    # LayerNorm: forward; backward as (forward + backward) - forward.
    x = torch.randn(N, C, device=dev, dtype=bf, requires_grad=True)
    ln = torch.nn.LayerNorm(C, device=dev)
    dout = torch.randn(N, C, device=dev, dtype=bf)
    with torch.autocast("cuda", dtype=bf):
        fwd = timed(lambda: ln(x))
        both = timed(lambda: torch.autograd.grad(ln(x), (x, ln.weight, ln.bias), dout))
    report("layernorm_fwd", fwd)
    report("layernorm_bwd", max(both - fwd, 0.0))

    # Cross-entropy forward + backward over the vocabulary.
    logits = torch.randn(N, V, device=dev, dtype=bf, requires_grad=True)
    targets = torch.randint(0, V, (N,), device=dev)
    report("cross_entropy_fwd_bwd",
           timed(lambda: torch.autograd.grad(F.cross_entropy(logits.float(), targets), logits)))

    # Causal attention (PyTorch picks its flash kernel for bf16).
    q, k, v = (torch.randn(B, H, T, D, device=dev, dtype=bf, requires_grad=True) for _ in range(3))
    fwd = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    g = torch.randn_like(out)
    both = timed(lambda: torch.autograd.grad(
        F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), g))
    report("attention_fwd", fwd)
    report("attention_bwd", max(both - fwd, 0.0))

    # Fused AdamW over GPT-2 124M's parameter tensors.
    sizes = [V * C, T * C]
    for _ in range(L):
        sizes += [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
    sizes += [C, C]
    params = [torch.zeros(s, device=dev, requires_grad=True) for s in sizes]
    for p in params:
        p.grad = torch.full_like(p, 1e-3)
    opt = torch.optim.AdamW(params, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    report(f"adamw_{sum(sizes) // 1000000}M", timed(opt.step))
    del params, opt

    # GEMMs: fc with bias and GELU, and the LM head.
    a = torch.randn(N, C, device=dev, dtype=bf)
    w = torch.randn(4 * C, C, device=dev, dtype=bf)
    bias = torch.randn(4 * C, device=dev, dtype=bf)
    report("gemm_fc_bias_gelu",
           timed(lambda: F.gelu(F.linear(a, w, bias), approximate="tanh")))
    wte = torch.randn(V, C, device=dev, dtype=bf)
    report("gemm_lm_head", timed(lambda: F.linear(a, wte)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
