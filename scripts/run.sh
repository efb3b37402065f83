#!/usr/bin/env bash
# Installs dependencies, builds Graft, starts graftd on its embedded defaults (in-memory cache,
# gRPC on 127.0.0.1:50051, metrics on 127.0.0.1:9464), optimizes the example model through it
# with the graft CLI, and keeps the server running in the foreground (Ctrl-C stops it).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh -DGRAFT_BUILD_TESTS=OFF -DGRAFT_BUILD_BENCH=OFF

./build/server/graftd "$@" &
graftd_pid=$!
trap 'kill -TERM "$graftd_pid" 2>/dev/null; wait "$graftd_pid"' INT TERM
server="${GRAFT_SERVER:-127.0.0.1:50051}"
for _ in $(seq 100); do
  ./build/client/graft health --server "$server" >/dev/null 2>&1 && break
  kill -0 "$graftd_pid" 2>/dev/null || { echo "graftd failed to start" >&2; exit 1; }
  sleep 0.1
done

# --verify: graftd also runs the original and the optimized model on the same random input of
# the classifier's real shape and compares the outputs (the table's last lines say how close).
echo "+ graft optimize models/ppocr_mobile_v2_cls.onnx -o build/ppocr_mobile_v2_cls.opt.onnx --server $server --verify --verify-shape x=1,3,48,192"
./build/client/graft optimize models/ppocr_mobile_v2_cls.onnx -o build/ppocr_mobile_v2_cls.opt.onnx \
  --server "$server" --report build/ppocr_mobile_v2_cls.report.json \
  --verify --verify-shape x=1,3,48,192
cat <<MSG

graftd is serving on $server (metrics: http://127.0.0.1:9464/metrics); Ctrl-C stops it.
Optimized model: build/ppocr_mobile_v2_cls.opt.onnx (report: build/ppocr_mobile_v2_cls.report.json)
Try:  ./build/client/graft optimize YOUR.onnx -o OUT.onnx --server $server
MSG
wait "$graftd_pid"
