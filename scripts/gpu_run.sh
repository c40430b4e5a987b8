#!/usr/bin/env bash
# Runs on the lent GPU machine, from the repository root, after
# scripts/gpu_bundle.sh packed gpu-bundle/ here: the kernel tests on the
# device, the generated CUDA programs on a CudaWorld (and one on a one-rank
# NcclWorld, libnccl itself), compute-sanitizer's
# memcheck over the kernel tests and the generated GPT, and the kernel benchmark
# with PyTorch's peers, then the GPT-2 124M peers (torch.compile and JAX).
# Logs go to ${OUT:-gpu-out}/. One device call:
#   run(command="scripts/gpu_run.sh", carry=["gpu-bundle"], timeout_s=480)
# Each section has a time limit, in the order that matters (correctness
# first, the peers last, with what is left of SHARC_GPU_BUDGET seconds,
# default 450), and prints how long it took: a cut run keeps every log so far.
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
export SHARC_PEERS_SCRIPT="$PWD/bench/gpu_kernels_peers.py"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
budget=${SHARC_GPU_BUDGET:-450}
took() { echo "   ($1: $((SECONDS - section_start)) s; $SECONDS s of $budget so far)"; section_start=$SECONDS; }
section_start=$SECONDS
echo "== kernel tests on the device"
timeout 90 gpu-bundle/gpu_kernels_cuda_test 2>&1 | tee "$out/cuda_test.txt" |
  grep -E "^\[  (PASSED|FAILED|SKIPPED)|Failure|element"
took "kernel tests"
echo "== generated CUDA programs on a CudaWorld, and the MLP on a one-rank NcclWorld (nvcc builds, against the oracle)"
timeout 150 gpu-bundle/gpu_cuda_programs_device_test 2>&1 | tee "$out/cuda_programs.txt" |
  grep -E "^\[  (PASSED|FAILED|SKIPPED)|OK \]|Failure|what\(\)|ms/step"
took "generated programs"
echo "== GPT step time: the CPU program on this machine's cores, beside the CUDA program's above"
grep -E "ms/step" "$out/cuda_programs.txt" | tee "$out/step_times.txt"
timeout 45 gpu-bundle/gpt2_main --mesh data=2,model=4 --steps 6 --sample 0 2>&1 | tail -3 | tee -a "$out/step_times.txt"
took "CPU step"
echo "== compute-sanitizer memcheck: the generated 2-layer GPT"
sanitizer=${SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
timeout 60 "$sanitizer" --tool memcheck \
  --error-exitcode 3 gpu-bundle/gpu_cuda_programs_device_test --gtest_filter='*ScannedGptOnData2Model4*' \
  > "$out/memcheck_generated.txt" 2>&1
echo "memcheck (generated GPT) rc=$?"; tail -3 "$out/memcheck_generated.txt"
took "memcheck of the generated GPT"
echo "== compute-sanitizer memcheck"
timeout 90 "$sanitizer" --tool memcheck --error-exitcode 3 gpu-bundle/gpu_kernels_cuda_test \
  --gtest_brief=1 > "$out/memcheck.txt" 2>&1
echo "memcheck rc=$?"; tail -5 "$out/memcheck.txt"
took "memcheck of the kernels"
echo "== bench_gpu_kernels --peers (B=16, T=1024)"
timeout 45 gpu-bundle/bench_gpu_kernels --batch 16 --peers 2>&1 | tee "$out/bench_kernels.txt"
took "kernel bench"
left=$((budget - SECONDS))
if [ "${SHARC_GPT2_PEERS:-1}" = 1 ] && [ "$left" -gt 30 ]; then
  echo "== GPT-2 124M peers (${left} s left)"
  timeout "$left" python3 bench/gpt2_peers.py --batch 16 32 --steps 10 2>&1 | grep -v Warning |
    tee "$out/gpt2_peers.txt"
  took "GPT-2 124M peers"
fi
echo "gpu_run.sh: $SECONDS s"
