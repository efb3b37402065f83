#!/usr/bin/env bash
# Installs every Debian 12 package Graft needs to build, run and test.
# Idempotent: apt-get skips what is already installed.
set -euo pipefail

packages=(
  build-essential cmake pkg-config ninja-build lld
  libabsl-dev libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libonnx-dev prometheus-cpp-dev libspdlog-dev libboost-dev libssl-dev
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libhiredis-dev libcivetweb-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # The evaluator's matrix products (core/eval/gemm.h): OpenBLAS's dgemm, its serial variant
  # (the pthread one starts threads before main that graftd's signals would reach).
  libopenblas-serial-dev
)
if [[ "${1:-}" == "--test" ]]; then
  # openssl: the TLS tests make throwaway certificates with it.
  packages+=(libonnx-testdata python3-yaml openssl)
  # The shared cache tier's tests start a real Redis; the Python client's tests use Debian's
  # gRPC and protobuf for Python under pytest, and onnx (with numpy) to make their models.
  packages+=(redis-server python3-grpcio python3-protobuf python3-pytest python3-onnx
    python3-numpy)
  # Sanitizer builds and fuzzing (scripts/sanitize.sh, scripts/fuzz.sh): clang 14 with its
  # sanitizer runtimes and libFuzzer, and llvm-symbolizer for readable reports.
  packages+=(clang libclang-rt-14-dev libfuzzer-14-dev llvm-14)
  # scripts/check-format.sh: the sources must be formatted as .clang-format says.
  packages+=(clang-format git)
  # scripts/image-check.sh (test.sh's image phase): podman with buildah and runc builds and runs
  # the Dockerfile's image, debootstrap makes its Debian base images.
  packages+=(podman buildah runc debootstrap)
  # The browser test of the HTML report: a headless chromium, and a font for it to render with.
  packages+=(chromium fonts-dejavu-core)
  # tests/deploy needs a kubectl; an installed one (e.g. the Cloud SDK's) owns /usr/bin/kubectl.
  command -v kubectl >/dev/null || packages+=(kubernetes-client)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y --no-install-recommends "${missing[@]}"
fi
