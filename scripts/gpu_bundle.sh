#!/usr/bin/env bash
# Packs what a session with a lent GPU runs into gpu-bundle/ (git-ignored),
# so that the GPU machine, which has CUDA, PyTorch and JAX but no GoogleTest,
# OpenBLAS or network, runs binaries built here:
#   - gpu_kernels_cuda_test, gpu_kernels_sim_test, bench_gpu_kernels;
#   - gpu_cuda_programs_device_test: generated BACKEND cuda programs (nvcc
#     builds) on a gpu::CudaWorld against the oracle, printing each step's
#     time, and the one-device MLP on a one-rank gpu::NcclWorld;
#   - gpt2_main: the same GPT's CPU program, for its step time there;
#   - bench_gpt2_gpu: the generated GPT-2 124M step beside torch.compile's
#     and JAX's (bench/gpt2_peers.py, which travels with the tree);
#   - the shared libraries they load that the GPU machine's image lacks
#     (everything but glibc and the CUDA driver/runtime), under lib/.
# Then one device call runs scripts/gpu_run.sh (see docs/guide/gpus.md, "GPU kernels").
#   scripts/gpu_bundle.sh            (builds into ${SHARC_BUILD_DIR:-build})
set -euo pipefail
cd "$(dirname "$0")/.."
build=${SHARC_BUILD_DIR:-build}
scripts/build.sh --target gpu_kernels_cuda_test gpu_kernels_sim_test bench_gpu_kernels gpu_cuda_programs_device_test \
  gpt2_main bench_gpt2_gpu
rm -rf gpu-bundle
mkdir -p gpu-bundle/lib
for b in tests/gpu/gpu_kernels_cuda_test tests/gpu/gpu_kernels_sim_test bench/bench_gpu_kernels \
         tests/gpu/gpu_cuda_programs_device_test samples/gpt2/gpt2_main bench/bench_gpt2_gpu; do
  cp "$build/$b" gpu-bundle/
done
# Shared libraries, resolved here; glibc, the dynamic loader and CUDA's own
# libraries (NCCL's too: 200 MB, past what a device call carries) come from
# the GPU machine.
ldd gpu-bundle/gpu_kernels_cuda_test gpu-bundle/bench_gpu_kernels gpu-bundle/gpu_cuda_programs_device_test \
    gpu-bundle/gpt2_main gpu-bundle/bench_gpt2_gpu |
  awk '/=> \// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so|/libcuda|/libcudart|/libcublas|/libnccl' |
  while read -r lib; do cp -L "$lib" gpu-bundle/lib/; done
# A device call carries 64 MiB at most: the binaries without their debug
# information, everything in one gzip archive (OpenBLAS alone is 36 MB, 11
# packed), which gpu_run.sh unpacks first.
for b in gpu-bundle/*; do [ -f "$b" ] && strip --strip-debug "$b"; done
tar -C gpu-bundle -czf gpu-bundle.tar.gz .
rm -rf gpu-bundle && mkdir gpu-bundle && mv gpu-bundle.tar.gz gpu-bundle/packed.tar.gz
size=$(stat -c %s gpu-bundle/packed.tar.gz)
echo "gpu-bundle/packed.tar.gz: $((size / 1048576)) MiB"
if [ "$size" -gt $((60 * 1048576)) ]; then
  echo "gpu_bundle.sh: the bundle is past 60 MiB, too close to the 64 MiB a device call carries" >&2
  exit 1
fi
