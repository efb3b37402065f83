// A model served in another layout (graft --io-layout) against the model as exported, under ONNX
// Runtime (onnxruntime-node), driven by ./run.
//
//   node --expose-gc measure.js JOB.json
//
// JOB: { original, variants: {key: {file, inputs: {name: perm}, outputs: {name: perm}}},
//        shapes: {input: dims}, threads: [1, 2], level: 'all', sessions, reps, warmup,
//        minTimeMs, creates }.
// A variant's input `name` is the original's transposed by perm (result dim i = dim perm[i]),
// and so are its outputs named in `outputs`. For each variant: the largest difference of every
// output from the original's on the same (transposed) inputs, latency against the original at
// each thread count (bench/ort_parity's timeInterleaved: paired sessions, interleaved runs, the
// geometric mean of per-pair median ratios), session creation (timeCreates), and the Transpose
// nodes left in the graph ORT optimizes the file to. The original is fed channels-first; the
// variant the same values channels-last, as a camera or TensorFlow pipeline hands them over.
// Prints one JSON object on stdout; progress on stderr.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { makeFeeds, timeInterleaved, moreSessions, timeCreates, errorText, countOps, cpuInfo } = require('../ort_parity/ort_common');
const precision = require('../ort_precision/precision');

function loadOrt() {
  const where = process.env.ORT_NODE_MODULES ? [process.env.ORT_NODE_MODULES] : [path.join(__dirname, '..', 'ort_precision')];
  return require(require.resolve('onnxruntime-node', { paths: where }));
}

// `data` of `dims` transposed by `perm` (result dim i is input dim perm[i]).
function transpose(data, dims, perm) {
  const rank = dims.length;
  const outDims = perm.map((p) => dims[p]);
  const inStrides = new Array(rank).fill(1);
  for (let k = rank - 2; k >= 0; k--) inStrides[k] = inStrides[k + 1] * dims[k + 1];
  const out = new data.constructor(data.length);
  const index = new Array(rank).fill(0);
  for (let i = 0; i < data.length; i++) {
    let src = 0;
    for (let k = 0; k < rank; k++) src += index[k] * inStrides[perm[k]];
    out[i] = data[src];
    for (let k = rank - 1; k >= 0; k--) {
      if (++index[k] < outDims[k]) break;
      index[k] = 0;
    }
  }
  return { data: out, dims: outDims };
}

function maxAbs(a, b) {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(Number(a[i]) - Number(b[i])));
  return m;
}

async function main() {
  const job = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const ort = loadOrt();
  const level = job.level || 'all';
  const options = (threads) => ({ ...precision.sessionOptions(level), intraOpNumThreads: threads });
  const log = (m) => console.error(`  ${m}`);
  const original = await ort.InferenceSession.create(job.original, options(1));
  const notes = [];
  const feeds = makeFeeds(ort, original.inputMetadata, { shapes: job.shapes || {} }, 1, notes, []);
  const want = await original.run(feeds);
  const out = { cpu: cpuInfo(), load_before: fs.readFileSync('/proc/loadavg', 'utf8').trim(), level, notes, variants: {} };
  for (const [key, v] of Object.entries(job.variants)) {
    const r = { file: v.file, bytes: fs.statSync(v.file).size };
    out.variants[key] = r;
    try {
      const vFeeds = {};
      for (const [name, t] of Object.entries(feeds)) {
        const perm = (v.inputs || {})[name];
        if (!perm) {
          vFeeds[name] = t;
          continue;
        }
        const moved = transpose(t.data, t.dims, perm);
        vFeeds[name] = new ort.Tensor(t.type, moved.data, moved.dims);
      }
      const s = await ort.InferenceSession.create(v.file, options(1));
      const got = await s.run(vFeeds);
      r.max_abs = {};
      for (const [name, w] of Object.entries(want)) {
        const perm = (v.outputs || {})[name];
        const expected = perm ? transpose(w.data, w.dims, perm) : { data: w.data, dims: w.dims };
        const g = got[name];
        if (!g || g.dims.join() !== expected.dims.join()) {
          r.max_abs[name] = `dims [${g && g.dims}] != [${expected.dims}]`;
          continue;
        }
        r.max_abs[name] = maxAbs(expected.data, g.data);
      }
      const optimized = path.join(os.tmpdir(), `graft-layout-${process.pid}-${key}.ort.onnx`);
      const so = await ort.InferenceSession.create(v.file, { ...options(1), optimizedModelFilePath: optimized });
      await so.release();
      r.ort_transposes = countOps(optimized)['ai.onnx:Transpose'] || 0;
      fs.unlinkSync(optimized);
      r.latency = {};
      for (const threads of job.threads || [1, 2]) {
        log(`${key}: ${threads} thread(s)`);
        const first = await ort.InferenceSession.create(v.file, options(threads));
        const base = await ort.InferenceSession.create(job.original, options(threads));
        const { as, bs } = await moreSessions(ort, v.file, first, job.original, base, job.sessions || 3, options(threads));
        const t = await timeInterleaved(as, vFeeds, bs, feeds,
          { reps: job.reps ?? 20, warmup: job.warmup ?? 3, minTimeMs: job.minTimeMs ?? 3000 }, log);
        r.latency[threads] = t.ratio;
        for (const x of [...as, ...bs]) await x.release();
      }
      r.create = (await timeCreates(ort, v.file, job.original, job.creates || 6, options(1))).ratio;
      await s.release();
    } catch (e) {
      r.error = errorText(e);
    }
  }
  const optimized = path.join(os.tmpdir(), `graft-layout-${process.pid}-original.ort.onnx`);
  const so = await ort.InferenceSession.create(job.original, { ...options(1), optimizedModelFilePath: optimized });
  await so.release();
  out.original_ort_transposes = countOps(optimized)['ai.onnx:Transpose'] || 0;
  fs.unlinkSync(optimized);
  console.log(JSON.stringify(out, null, 1));
}

main().catch((e) => {
  console.error(errorText(e));
  process.exit(1);
});
