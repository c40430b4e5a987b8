#!/usr/bin/env bash
# Runs on the lent GPU machine, from the repository root, after
# scripts/gpu_bundle.sh packed gpu-bundle/ here. Sections, in the order that
# matters (correctness first):
#   kernels    the kernel tests on the device
#   programs   the generated CUDA programs on a CudaWorld against the oracle
#              (and one on a one-rank NcclWorld, libnccl itself), GPT-2 124M
#              against the CPU program, the CPU program's step time
#   memcheck   compute-sanitizer memcheck over the generated 2-layer GPT and
#              the kernel tests; racecheck over the attention kernels' tests
#   kbench     bench_gpu_kernels --peers (PyTorch's kernels in the same run)
#   gpt2       bench_gpt2_gpu: sharc's GPT-2 124M step beside torch.compile's
#              and JAX's, and the step's GPU timeline as a Chrome trace
#   nsys       the same step (batch 16, sharc only) under Nsight Systems: the
#              time of every CUDA kernel, where the trace has one statement
# SHARC_GPU_SECTIONS picks some (default: all); SHARC_GPU_FILTER narrows the
# programs section to a GoogleTest filter; SHARC_KBENCH_PEERS=0 leaves
# PyTorch's kernels out of the kernel bench. Logs go to ${OUT:-gpu-out}/. Each
# section has a time limit and prints how long it took, so a cut run keeps
# every log so far. One device call:
#   run(command="scripts/gpu_run.sh", carry=["gpu-bundle"], timeout_s=480)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
[ -f gpu-bundle/packed.tar.gz ] && tar -C gpu-bundle -xzf gpu-bundle/packed.tar.gz
# CUDA's runtime, cuBLASLt and NCCL come from the machine: the toolkit's, or
# else the copies PyTorch's wheels installed.
cuda_libs=$(python3 - <<'PY' 2>/dev/null
import importlib, os
for m in ("nvidia.cu13", "nvidia.cublas", "nvidia.cuda_runtime", "nvidia.nccl"):
    try:
        mod = importlib.import_module(m)
        for d in mod.__path__:
            if os.path.isdir(os.path.join(d, "lib")):
                print(os.path.join(d, "lib"))
    except ImportError:
        pass
PY
)
export LD_LIBRARY_PATH="$PWD/gpu-bundle/lib:/usr/local/cuda/lib64:$(echo $cuda_libs | tr ' ' ':')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "== libraries"; ldd gpu-bundle/gpu_cuda_programs_device_test | grep -E "cuda|cublas|nccl|not found"
export SHARC_PEERS_SCRIPT="$PWD/bench/gpu_kernels_peers.py" SHARC_GPT2_PEERS_SCRIPT="$PWD/bench/gpt2_peers.py"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
sections=" ${SHARC_GPU_SECTIONS:-kernels programs memcheck kbench gpt2 nsys} "
want() { [[ "$sections" == *" $1 "* ]]; }
took() { echo "   ($1: $((SECONDS - section_start)) s; $SECONDS s so far)"; section_start=$SECONDS; }
section_start=$SECONDS
if want kernels; then
  echo "== kernel tests on the device"
  timeout 90 gpu-bundle/gpu_kernels_cuda_test 2>&1 | tee "$out/cuda_test.txt" |
    grep -E "^\[  (PASSED|FAILED|SKIPPED)|Failure|element"
  took "kernel tests"
fi
if want programs; then
  echo "== generated CUDA programs on a CudaWorld, the MLP on a one-rank NcclWorld, GPT-2 124M against the CPU program"
  timeout 200 gpu-bundle/gpu_cuda_programs_device_test --gtest_filter="${SHARC_GPU_FILTER:-*}" 2>&1 |
    tee "$out/cuda_programs.txt" | grep -E "^\[  (PASSED|FAILED|SKIPPED)|OK \]|Failure|what\(\)|ms/step|GPT-2 124M"
  took "generated programs"
  echo "== GPT step time: the CPU program on this machine's cores, beside the CUDA program's above"
  timeout 45 gpu-bundle/gpt2_main --mesh data=2,model=4 --steps 6 --sample 0 2>&1 | tail -1 | tee "$out/step_times.txt"
  took "CPU step"
fi
if want memcheck; then
  sanitizer=${SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
  echo "== compute-sanitizer memcheck: the generated 2-layer GPT"
  timeout 60 "$sanitizer" --tool memcheck \
    --error-exitcode 3 gpu-bundle/gpu_cuda_programs_device_test --gtest_filter='*ScannedGptOnData2Model4*' \
    > "$out/memcheck_generated.txt" 2>&1
  echo "memcheck (generated GPT) rc=$?"; tail -3 "$out/memcheck_generated.txt"
  echo "== compute-sanitizer memcheck: the kernel tests"
  timeout 90 "$sanitizer" --tool memcheck --error-exitcode 3 gpu-bundle/gpu_kernels_cuda_test \
    --gtest_brief=1 > "$out/memcheck.txt" 2>&1
  echo "memcheck rc=$?"; tail -3 "$out/memcheck.txt"
  # The attention kernels stage tiles two deep with asynchronous copies
  # (cp.async): a missing wait or barrier is a shared-memory race, which
  # the simulator cannot see.
  echo "== compute-sanitizer racecheck: the attention kernels"
  timeout 90 "$sanitizer" --tool racecheck --error-exitcode 3 gpu-bundle/gpu_kernels_cuda_test \
    --gtest_filter='*Attention*' --gtest_brief=1 > "$out/racecheck.txt" 2>&1
  echo "racecheck rc=$?"; tail -3 "$out/racecheck.txt"
  took "memcheck and racecheck"
fi
if want kbench; then
  echo "== bench_gpu_kernels --peers (B=16, T=1024)"
  peers=--peers
  [ "${SHARC_KBENCH_PEERS:-1}" = 0 ] && peers=
  timeout 90 gpu-bundle/bench_gpu_kernels --batch 16 --iters 10 $peers 2>&1 | tee "$out/bench_kernels.txt" |
    grep -v "^  measured"
  took "kernel bench"
fi
if want gpt2; then
  echo "== bench_gpt2_gpu: GPT-2 124M, sharc beside torch.compile and JAX"
  timeout "${SHARC_GPT2_TIMEOUT:-240}" gpu-bundle/bench_gpt2_gpu --batch 16 32 --steps 10 --warmup 3 \
    --peers ${SHARC_GPT2_PEERS:-torch jax} --trace "$out/gpt2_124m_gpu_trace.json" 2>&1 |
    grep -Ev "Warning|^W[0-9]|bfc_allocator|^\*|allocation summary|memory fragmentation" | tee "$out/gpt2_gpu.txt"
  took "GPT-2 124M"
fi
if want nsys; then
  nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
  if [ -z "$nsys" ]; then
    echo "== nsys: not on this machine"
  else
    echo "== nsys: every CUDA kernel of the GPT-2 124M step (batch 16, 3 steps after 1 warm-up)"
    timeout 120 "$nsys" profile --force-overwrite true -o "$out/gpt2_step" --trace cuda \
      gpu-bundle/bench_gpt2_gpu --batch 16 --steps 3 --warmup 1 --peers none > "$out/nsys_run.txt" 2>&1
    timeout 60 "$nsys" stats --force-export true --report cuda_gpu_kern_sum --format csv \
      --output "$out/gpt2_step" "$out/gpt2_step.nsys-rep" > /dev/null 2>&1
    head -30 "$out"/gpt2_step*kern_sum*.csv 2>/dev/null | cut -c1-200
    rm -f "$out/gpt2_step.sqlite"
  fi
  took "nsys"
fi
echo "gpu_run.sh: $SECONDS s"
