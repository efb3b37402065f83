'use strict';
// ONNX Runtime's latency on the eval_speed models, for scale beside graft_eval_bench: one
// thread, graph optimizations disabled (the graph as written, as the evaluator runs it), one
// seeded random float input in [-1, 1], median of N runs after a warm-up.
//   node ort.js [--reps N] MODEL.onnx ...
const path = require('path');
const ort = require('onnxruntime-node');

async function main() {
  const args = process.argv.slice(2);
  let reps = 10;
  const models = [];
  for (let i = 0; i < args.length; ++i) {
    if (args[i] === '--reps') reps = Number(args[++i]);
    else models.push(args[i]);
  }
  console.log(`onnxruntime-node ${require('onnxruntime-node/package.json').version}`);
  for (const file of models) {
    const session = await ort.InferenceSession.create(file, {
      graphOptimizationLevel: 'disabled',
      intraOpNumThreads: 1,
      interOpNumThreads: 1,
      executionMode: 'sequential',
    });
    const name = session.inputNames[0];
    const meta = session.inputMetadata ? session.inputMetadata[0] : null;
    const dims = meta && meta.shape ? meta.shape : null;
    if (!dims) throw new Error(`${file}: input shape unknown`);
    const count = dims.reduce((a, b) => a * b, 1);
    const data = new Float32Array(count);
    let s = 1;
    for (let i = 0; i < count; ++i) {
      s = (s * 48271) % 2147483647;  // seeded: the same input every run
      data[i] = (s / 2147483647) * 2 - 1;
    }
    const feeds = { [name]: new ort.Tensor('float32', data, dims) };
    await session.run(feeds);  // warm-up
    const times = [];
    for (let r = 0; r < reps; ++r) {
      const start = process.hrtime.bigint();
      await session.run(feeds);
      times.push(Number(process.hrtime.bigint() - start) / 1e6);
    }
    times.sort((a, b) => a - b);
    const mid = times.length >> 1;
    const median = times.length % 2 ? times[mid] : (times[mid - 1] + times[mid]) / 2;
    console.log(`${path.basename(file).padEnd(16)} ORT 1 thread, no graph optimizations: ${median.toFixed(1)} ms`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
