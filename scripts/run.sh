#!/usr/bin/env bash
# Installs dependencies, builds Graft and optimizes the example model in-process, printing the
# per-pass table. (The gRPC service arrives with graftd; until then the CLI's --local mode is
# the main job.)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh -DGRAFT_BUILD_TESTS=OFF -DGRAFT_BUILD_BENCH=OFF
./build/client/graft optimize --local models/ppocr_mobile_v2_cls.onnx -o build/ppocr_mobile_v2_cls.opt.onnx \
  --report build/ppocr_mobile_v2_cls.report.json
echo "optimized model: build/ppocr_mobile_v2_cls.opt.onnx (report: build/ppocr_mobile_v2_cls.report.json)"
