#!/usr/bin/env python3
"""bench_vs_jax: sharc against JAX on CPU, the same training step on the same
meshes, measured side by side in one invocation on one machine.

    bench_vs_jax.py --bench-train build/bench/bench_train [--steps 20] [--warmup 3]
                    [--windows 5] [--models mlp,gpt] [--only MODEL:MESH]... [--venv DIR]
                    [--keep-blas-env]

(or `ninja -C build bench_vs_jax`, which passes the paths). For every (model,
mesh) that bench_train has compiled in, it runs sharc's program (bench_train,
one process) and then the same step in JAX (jax_models.py, one process, 8
fake CPU devices via --xla_force_host_platform_device_count=8, the parameter
layouts sharc chose for that mesh, its inputs' layouts too), and prints per
mesh: examples/s of each and their ratio, collective bytes sent per device
per step (sharc's from its ring collectives; JAX's from the compiled HLO,
every operand of a tuple all-reduce counted, see jax_models.py) and memory
per device (sharc's measured peak; XLA's memory_analysis: arguments +
outputs - aliased + temporaries). It also measures this machine's sgemm rate
(a 2048^3 sgemm on every core) and prints the one-device MLP step's GEMM
rate as a fraction of it.

Timing: after the warm-up, each side runs --windows windows of --steps steps
and reports its fastest window. These benches run on shared machines where a
neighbour's burst slows a window for a second or two; the fastest window is
the least disturbed one, and both sides get the same treatment.

JAX comes from the Python running this script when it imports jax
(scripts/install_deps.sh installs it), else from a virtual environment
(default: <bench_train's folder>/jax-venv), made and filled from PyPI when
`import jax` fails there too.

--only MODEL:MESH (repeatable) runs just those rows; the bench_smoke test
runs one row per model that way, one step each, so the script cannot break
unseen.

OPENBLAS_CORETYPE: some machines set it in the environment (e.g. to Haswell
on a CPU that runs AVX-512), which forces OpenBLAS's kernel family; sharc's
rows then measure those kernels, not the ones OpenBLAS would pick for the
CPU. The bench drops it for the sharc runs and says so, unless
--keep-blas-env is given. XLA does not use OpenBLAS either way.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import venv

HERE = os.path.dirname(os.path.abspath(__file__))

# The MLP classifier's multiply-adds per example (784 -> 512 -> 512 -> 10):
# forward, and in the backward pass the weight gradients of all three layers
# and the input gradients of the last two (the images need none).
MLP_LAYERS = [(784, 512), (512, 512), (512, 10)]
MLP_FLOPS_PER_EXAMPLE = 2 * (3 * sum(a * b for a, b in MLP_LAYERS) - MLP_LAYERS[0][0] * MLP_LAYERS[0][1])


def ensure_jax(venv_dir):
    # This Python's JAX when it has one (scripts/install_deps.sh installs it).
    if subprocess.run([sys.executable, "-c", "import jax"], capture_output=True).returncode == 0:
        return sys.executable
    py = os.path.join(venv_dir, "bin", "python")
    if os.path.exists(py) and subprocess.run([py, "-c", "import jax"],
                                             capture_output=True).returncode == 0:
        return py
    print(f"bench_vs_jax: installing JAX from PyPI into {venv_dir}", flush=True)
    venv.create(venv_dir, with_pip=True)
    subprocess.run([py, "-m", "pip", "install", "--quiet", "jax"], check=True)
    return py


def sharc_row(bench, model, mesh, args, env):
    out = subprocess.run([bench, "--model", model, "--mesh", mesh, "--steps", str(args.steps),
                          "--warmup", str(args.warmup), "--windows", str(args.windows)],
                         capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(f"bench_train --model {model} --mesh {mesh} failed:\n{out.stderr}")
    return json.loads(out.stdout)


def jax_row(py, row, args):
    req = dict(model=row["model"], axes=row["axes"], parameters=row["parameters"],
               inputs=row["inputs"], steps=args.steps, warmup=args.warmup,
               windows=args.windows)
    if row["model"] == "gpt":
        p = {t["name"]: t["shape"] for t in row["parameters"] if not t["name"].startswith("opt/")}
        if "h/attn/qkv/kernel" in p:  # stacked: [layers, ...]
            layers = p["h/attn/qkv/kernel"][0]
        else:
            layers = sum(1 for n in p if n.endswith("/attn/qkv/kernel"))
        embed = p["wte/embedding"][1]
        req["config"] = dict(vocab=p["wte/embedding"][0], embed=embed, layers=layers,
                             heads=args.gpt_heads, dropout=0.1)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
               JAX_PLATFORMS="cpu")
    out = subprocess.run([py, os.path.join(HERE, "jax_models.py")], input=json.dumps(req),
                         capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(f"JAX run of {row['model']} on {row['mesh']} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout)


def mib(b):
    return "-" if b is None else f"{b / 2**20:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench-train", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--windows", type=int, default=5,
                    help="timed windows of --steps steps each; the fastest window counts, for "
                         "both sharc and JAX")
    ap.add_argument("--models", default="mlp,gpt")
    ap.add_argument("--only", action="append", default=[], metavar="MODEL:MESH",
                    help="run only these rows (repeatable), e.g. --only mlp:data=4,model=2")
    ap.add_argument("--venv", default=None)
    ap.add_argument("--gpt-heads", type=int, default=8, help="the GPT sample's head count")
    ap.add_argument("--keep-blas-env", action="store_true")
    args = ap.parse_args()

    bench = os.path.abspath(args.bench_train)
    py = ensure_jax(args.venv or os.path.join(os.path.dirname(bench), "jax-venv"))
    env = dict(os.environ)
    dropped = None
    if not args.keep_blas_env and "OPENBLAS_CORETYPE" in env:
        dropped = env.pop("OPENBLAS_CORETYPE")
    env.pop("OPENBLAS_NUM_THREADS", None)  # the runtime sets BLAS threads per world

    listed = subprocess.run([bench, "--list"], capture_output=True, text=True, check=True).stdout
    pairs = [l.split(" ", 1) for l in listed.splitlines() if l.strip()]
    models = args.models.split(",")
    sgemm = json.loads(subprocess.run([bench, "--sgemm"], capture_output=True, text=True, env=env,
                                      check=True).stdout)
    jax_version = subprocess.run([py, "-c", "import jax; print(jax.__version__)"],
                                 capture_output=True, text=True).stdout.strip()

    print(f"bench_vs_jax: {args.warmup} warm-up steps, then the fastest of {args.windows} windows "
          f"of {args.steps} steps, per mesh, sharc then JAX for each mesh")
    print(f"machine: {platform.processor() or platform.machine()}, {sgemm['cores']} cores; "
          f"sgemm 2048^3 on every core: {sgemm['sgemm_gflops']:.1f} GFLOP/s "
          f"(OpenBLAS {sgemm['blas']} kernels)")
    if dropped:
        print(f"note: OPENBLAS_CORETYPE={dropped} from the environment was not passed to sharc "
              f"(--keep-blas-env keeps it)")
    print(f"JAX {jax_version} on 8 fake CPU devices; sharc on a ThreadWorld (one thread per "
          f"device, or with fewer cores than devices the devices as fibers on one thread per "
          f"core: the 'thr' column)")

    hdr = (f"{'model':5} {'mesh':15} {'sharc ex/s':>11} {'JAX ex/s':>10} {'ratio':>6} "
           f"{'sharc B/dev':>12} {'JAX B/dev':>12} {'sharc MiB/dev':>13} {'JAX MiB/dev':>11} "
           f"{'sharc loss':>10} {'JAX loss':>9} {'thr':>3}")
    rows = []
    first = True
    only = set(args.only)
    unknown = only - {f"{m}:{mesh}" for m, mesh in pairs}
    if unknown:
        raise SystemExit(f"bench_vs_jax: --only {', '.join(sorted(unknown))}: bench_train has no such row "
                         f"(it has: {', '.join(f'{m}:{mesh}' for m, mesh in pairs)})")
    for model, mesh in pairs:
        if model not in models or (only and f"{model}:{mesh}" not in only):
            continue
        s = sharc_row(bench, model, mesh, args, env)
        if first:
            print(f"sharc's GEMMs: {s.get('gemm', 'blas')} kernels\n")
            print(hdr)
            first = False
        j = jax_row(py, s, args)
        rows.append((s, j))
        mem = j["memory"]["total"] if j.get("memory") else None
        print(f"{model:5} {mesh:15} {s['examples_per_s']:11.0f} {j['examples_per_s']:10.0f} "
              f"{s['examples_per_s'] / j['examples_per_s']:5.2f}x {s['bytes_per_device']:12.0f} "
              f"{j['bytes_per_device']:12.0f} {mib(s['peak_bytes']):>13} {mib(mem):>11} "
              f"{s['loss']:10.4f} {j['loss']:9.4f} {s.get('device_threads', s['devices']):3d}",
              flush=True)
    for s, j in rows:
        if s["model"] == "mlp" and s["devices"] == 1:
            rate = MLP_FLOPS_PER_EXAMPLE * s["examples_per_s"] / 1e9
            print(f"\none-device MLP step: {rate:.1f} GFLOP/s of GEMM work "
                  f"({MLP_FLOPS_PER_EXAMPLE / 1e6:.2f} MFLOP per example), "
                  f"{100 * rate / sgemm['sgemm_gflops']:.0f}% of the machine's sgemm rate")
    print("\nJAX collectives per mesh (calls, bytes per device):")
    for s, j in rows:
        kinds = ", ".join(f"{k} {v['calls']}x {v['bytes']:.0f} B" for k, v in sorted(j["collectives"].items()))
        print(f"  {s['model']:5} {s['mesh']:15} {kinds or '(none)'}")


if __name__ == "__main__":
    main()
