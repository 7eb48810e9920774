#!/usr/bin/env bash
# Installs what parallax needs from Debian's packages, once: a second run
# finds everything present and installs nothing. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libopenblas-dev libopenblas0-openmp zlib1g-dev
  libdnnl-dev                # oneDNN: bf16 GEMM (src/kernels/dnnl_matmul.cc)
  libfmt-dev nlohmann-json3-dev libcli11-dev
  libcpp-httplib-dev         # `parallax serve`'s HTTP server and `bench serve`'s client (src/serve)
  libonnx-dev libprotobuf-dev protobuf-compiler   # ONNX import (src/nn/onnx; docs/onnx.md)
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  mpich libmpich-dev
  dataset-fashion-mnist fortunes
  python3-torch python3-numpy python3-protobuf   # python3-protobuf: the ONNX export round trip (tests/interop)
  clang libclang-rt-14-dev   # the sanitizer builds and libFuzzer (scripts/test.sh --asan, --tsan, --fuzz)
  chromium                   # the report test renders `parallax report` pages headless (tests/report/)
  iproute2                   # scripts/hosts.sh: network namespaces as hosts (tests/hosts/, docs/multi_host.md)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
