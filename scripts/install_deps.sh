#!/usr/bin/env bash
# Installs what sharc needs to build and test from Debian's packages, skipping
# what is already there. Runs apt-get as root, or through sudo when available.
# zlib1g-dev and dataset-fashion-mnist (the real Fashion-MNIST, 30 MB, under
# /usr/share/datasets/fashion-mnist/) are for samples/mlp_classifier;
# nlohmann-json3-dev is for the tests that parse Chrome traces.
set -euo pipefail
need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in cmake ninja-build g++ libgtest-dev libopenblas-dev ccache diffutils zlib1g-dev \
         dataset-fashion-mnist nlohmann-json3-dev; do
  have "$p" || need+=("$p")
done
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
echo "sharc: installing ${need[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
