#!/usr/bin/env bash
# Installs what sharc needs to build and test from Debian's packages, skipping
# what is already there. Runs apt-get as root, or through sudo when available.
# zlib1g-dev and dataset-fashion-mnist (the real Fashion-MNIST, 30 MB, under
# /usr/share/datasets/fashion-mnist/) are for samples/mlp_classifier;
# nlohmann-json3-dev is for checkpoints (their JSON index) and the tests that
# parse Chrome traces; clang-14 builds the checkpoint reader fuzzer.
# libopenmpi-dev and openmpi-bin are for MpiWorld and its mpirun tests;
# libxsmm-dev gives rt::gemm its JIT-compiled small-GEMM kernels;
# libboost-context-dev lets a ThreadWorld run more devices than cores as
# fibers (runtime/fibers.h); libcli11-dev parses every tool's command line
# (codegen/cli.h); doxygen builds the API reference (docs/api, ctest
# docs_api_reference); libclang-14-dev (Clang's headers),
# libclang-cpp14-dev and llvm-14-dev are Clang LibTooling, which sharc-lift
# (lift/) is built on. libicu-dev classifies characters for the GPT-2
# tokenizer (runtime/tokenizer.h) that samples/finetune uses. python3 with pip runs the test that reads an export
# with Python's safetensors package and the bench_smoke tests, whose peer is
# JAX (CPU): safetensors, numpy and jax are installed from PyPI when missing.
set -euo pipefail
need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in cmake ninja-build g++ libgtest-dev libopenblas-dev ccache diffutils zlib1g-dev \
         dataset-fashion-mnist nlohmann-json3-dev clang-14 python3 python3-pip \
         libopenmpi-dev openmpi-bin libclang-cpp14-dev libclang-14-dev llvm-14-dev libxsmm-dev \
         libboost-context-dev libcli11-dev doxygen libicu-dev; do
  have "$p" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "sharc: installing ${need[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# scalax: docs/guide/from-jax.md records its FSDP rule's layouts from Scalax
# itself (tests/docs/jax_layouts.py; it needs only numpy, jax and einops).
if ! python3 -c "import safetensors, numpy, jax, scalax" 2>/dev/null; then
  echo "sharc: installing safetensors, numpy, jax and scalax for python3 (pip)"
  python3 -m pip install --quiet safetensors numpy jax scalax 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages safetensors numpy jax scalax
fi
