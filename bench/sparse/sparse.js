'use strict';
// bench/sparse: a model with dense weights (A) against the same model with store_sparse's sparse
// initializers (B) under ONNX Runtime's CPU provider: outputs (max |A - B|, expected 0), session
// creation (n creations of each, interleaved, ratio B/A; wall time and process CPU time) and latency at 1 thread (interleaved
// runs, ratio B/A). Uses ../ort_parity/ort_common.js for the timing.
//
// Usage: node --expose-gc sparse.js DENSE.onnx SPARSE.onnx --ort PATH_TO_onnxruntime-node
//                                   [--width 1024] [--creates 10] [--sessions 3] [--reps 200]
//                                   [--json OUT]
const fs = require('fs');
const path = require('path');
const common = require('../ort_parity/ort_common.js');

function fail(msg) {
  console.error(`sparse.js: ${msg}`);
  process.exit(2);
}

async function main() {
  const argv = process.argv.slice(2);
  const files = [];
  const opt = { ort: path.join(__dirname, '..', 'ort_precision', 'node_modules', 'onnxruntime-node'),
    creates: 10, sessions: 3, reps: 200, width: 1024, json: '' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--ort') opt.ort = argv[++i];
    else if (a === '--creates') opt.creates = common.integerArg(a, argv[++i], 1, fail);
    else if (a === '--sessions') opt.sessions = common.integerArg(a, argv[++i], 1, fail);
    else if (a === '--reps') opt.reps = common.integerArg(a, argv[++i], 1, fail);
    else if (a === '--width') opt.width = common.integerArg(a, argv[++i], 1, fail);
    else if (a === '--json') opt.json = argv[++i];
    else if (a.startsWith('--')) fail(`unknown option ${a}`);
    else files.push(a);
  }
  if (files.length !== 2) fail('needs DENSE.onnx and SPARSE.onnx');
  const ort = require(opt.ort);
  const [dense, sparse] = files;
  const so = { intraOpNumThreads: 1, interOpNumThreads: 1, graphOptimizationLevel: 'all' };

  const a = await ort.InferenceSession.create(dense, so);
  const b = await ort.InferenceSession.create(sparse, so);
  // Seeded input x [8, width] uniform in [-2, 2].
  const rand = common.mulberry32(1);
  const batch = 8;
  const data = Float32Array.from({ length: batch * opt.width }, () => rand() * 4 - 2);
  const feeds = { [a.inputNames[0]]: new ort.Tensor('float32', data, [batch, opt.width]) };
  const ya = (await a.run(feeds))[a.outputNames[0]].data;
  const yb = (await b.run(feeds))[b.outputNames[0]].data;
  let maxDiff = 0;
  for (let i = 0; i < ya.length; i++) maxDiff = Math.max(maxDiff, Math.abs(ya[i] - yb[i]));

  const creates = await common.timeCreates(ort, sparse, dense, opt.creates, so);
  // The same in process CPU time (user + system, every thread), which other load on the machine
  // disturbs less than wall time: pairs alternating in order, the median of the ratios.
  const cpuOnce = async (file) => {
    if (global.gc) global.gc();
    const c0 = process.cpuUsage();
    const s = await ort.InferenceSession.create(file, so);
    const c = process.cpuUsage(c0);
    await s.release();
    return (c.user + c.system) / 1000;
  };
  const cpu = { a: [], b: [] };
  for (let i = 0; i < opt.creates; i++) {
    if (i % 2 === 0) {
      cpu.a.push(await cpuOnce(sparse));
      cpu.b.push(await cpuOnce(dense));
    } else {
      cpu.b.push(await cpuOnce(dense));
      cpu.a.push(await cpuOnce(sparse));
    }
  }
  const cpuRatio = common.median(cpu.a.map((x, i) => x / cpu.b[i]));
  const { as, bs } = await common.moreSessions(ort, sparse, b, dense, a, opt.sessions, so);
  const lat = await common.timeInterleaved(as, feeds, bs, feeds,
    { warmup: 5, reps: opt.reps, minTimeMs: 2000 }, (m) => console.log(m));
  const result = {
    dense_bytes: fs.statSync(dense).size,
    sparse_bytes: fs.statSync(sparse).size,
    file_ratio: fs.statSync(sparse).size / fs.statSync(dense).size,
    max_abs_diff: maxDiff,
    create_ms_dense: common.median(creates.b),
    create_ms_sparse: common.median(creates.a),
    create_ratio: creates.ratio,
    create_cpu_ms_dense: common.median(cpu.b),
    create_cpu_ms_sparse: common.median(cpu.a),
    create_cpu_ratio: cpuRatio,
    run_ms_dense: common.median(lat.b),
    run_ms_sparse: common.median(lat.a),
    latency_ratio: lat.ratio,
    ort_version: ort.env && ort.env.versions ? ort.env.versions.common : 'unknown',
  };
  common.printTable([
    ['', 'dense', 'sparse', 'sparse/dense'],
    ['file bytes', String(result.dense_bytes), String(result.sparse_bytes), result.file_ratio.toFixed(3)],
    ['session creation ms (median)', common.fmtMs(result.create_ms_dense), common.fmtMs(result.create_ms_sparse),
      result.create_ratio.toFixed(3)],
    ['session creation CPU ms (median)', common.fmtMs(result.create_cpu_ms_dense),
      common.fmtMs(result.create_cpu_ms_sparse), result.create_cpu_ratio.toFixed(3)],
    ['run ms at 1 thread (median)', common.fmtMs(result.run_ms_dense), common.fmtMs(result.run_ms_sparse),
      result.latency_ratio.toFixed(3)],
  ]);
  console.log(`outputs: max |dense - sparse| = ${maxDiff}`);
  if (opt.json) fs.writeFileSync(opt.json, JSON.stringify(result, null, 1) + '\n');
}

main().catch((e) => fail(common.errorText(e)));
