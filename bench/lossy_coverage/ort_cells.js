'use strict';
// ONNX Runtime side of bench/lossy_coverage (see README.md there). Reuses bench/ort_precision's
// input sets, ORT runs and error measure (precision.js) and bench/ort_parity's interleaved timing
// (ort_common.js); onnxruntime-node is the copy installed in bench/ort_precision.
//
//   node --expose-gc ort_cells.js errors JOB.json
//     JOB = { sets: DIR (test_data_set_K folders), original: FILE, cells: { KEY: FILE, ... },
//             levels: ['disabled', 'all'] }
//     Runs the original and each cell's model under ORT (1 thread) at each level on the same
//     input sets and prints one JSON line: { levels: { LEVEL: { KEY: { OUTPUT: {max_abs, rel,
//     cosine[, exact][, problem]} } } }, kernels: { KEY: { OP: count } }, errors: { ... } }.
//     JOB.detection (optional): box outputs graft judged as detections; each one's group (the
//     outputs with as many rows) is compared as graft compares it (compareDetections): boxes get
//     { detection, matched, original_rows, candidate_rows, mean_iou, min_iou, detail }, the
//     group's float outputs their errors on the matched rows.
//
//   node --expose-gc ort_cells.js latency JOB.json
//     JOB = { sets: DIR, base: FILE, pairs: { KEY: FILE, ... }, threads: [1, 2], level: 'all',
//             reps, warmup, minTimeMs, sessions }
//     Times each pair's model against base (interleaved, paired sessions, ratio = KEY / base)
//     at each thread count on input set 0 and prints one JSON line.

const fs = require('fs');
const path = require('path');
const precision = require('../ort_precision/precision');
const { timeInterleaved, moreSessions, median, errorText, cpuInfo } = require('../ort_parity/ort_common');

const ORT_DIR = path.join(__dirname, '..', 'ort_precision');

function loadOrt() {
  const ort = require(require.resolve('onnxruntime-node', { paths: [ORT_DIR] }));
  ort.env.logLevel = 'fatal';
  return ort;
}

// ---------------------------------------------------------------- detections
// graft's rule (core/eval/task_gate.h): the rows of a detection group are matched one to one,
// the original's most confident first (its rank-1 float output), each to the unmatched
// candidate row with equal integer outputs (labels) and the highest box IoU, at least 0.5
// (boxes as corners x1, y1, x2, y2, as torchvision writes them). The figure is the smaller of
// the matched shares of the original's and the candidate's rows.

function value(t, i) {
  return Number(t.data[i]);  // bigint (int64 labels) too
}

function boxIou(a, i, b, j) {
  const [ax1, ay1, ax2, ay2] = [0, 1, 2, 3].map((c) => value(a, 4 * i + c));
  const [bx1, by1, bx2, by2] = [0, 1, 2, 3].map((c) => value(b, 4 * j + c));
  const w = Math.min(ax2, bx2) - Math.max(ax1, bx1);
  const h = Math.min(ay2, by2) - Math.max(ay1, by1);
  if (!(w > 0 && h > 0)) return 0;
  const inter = w * h;
  const union = (ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1) - inter;
  return union > 0 ? inter / union : 0;
}

// Rows `rows` of output tensor t ([R, ...]) as a float tensor-like value ErrorSums reads.
function gatherRows(t, rows, total) {
  const width = total > 0 ? t.data.length / total : 0;
  const data = new Float64Array(rows.length * width);
  rows.forEach((r, k) => {
    for (let c = 0; c < width; c++) data[k * width + c] = value(t, r * width + c);
  });
  return { type: 'float64', dims: [rows.length, width], data };
}

function compareDetections(reference, got, boxesNames) {
  const errs = precision.compareRuns(reference, got);
  for (const boxes of boxesNames) {
    if (!reference.outputNames.includes(boxes)) continue;
    let orig = 0, cand = 0, matched = 0, iouSum = 0, iouMin = 1;
    const sums = {};
    for (let k = 0; k < reference.outs.length; k++) {
      const A = reference.outs[k], B = got.outs[k];
      if (!B || !B[boxes]) continue;
      const ra = A[boxes].dims[0], rb = B[boxes].dims[0];
      if (A[boxes].data.length !== 4 * ra || B[boxes].data.length !== 4 * rb) continue;
      const members = reference.outputNames.filter((n) => n !== boxes && A[n].dims.length >= 1 &&
        A[n].dims[0] === ra && B[n] && B[n].dims[0] === rb);
      const ints = members.filter((n) => !precision.isFloat(A[n].type));
      const floats = members.filter((n) => precision.isFloat(A[n].type));
      const score = floats.find((n) => A[n].dims.length === 1);
      const order = [...Array(ra).keys()];
      if (score) order.sort((x, y) => value(A[score], y) - value(A[score], x));
      const used = new Uint8Array(rb);
      const pa = [], pb = [];
      for (const i of order) {
        let best = -1, bestIou = 0.5;
        for (let j = 0; j < rb; j++) {
          if (used[j]) continue;
          if (!ints.every((n) => {
            const w = A[n].data.length / ra;
            for (let c = 0; c < w; c++) if (value(A[n], i * w + c) !== value(B[n], j * w + c)) return false;
            return true;
          })) continue;
          const u = boxIou(A[boxes], i, B[boxes], j);
          if (u >= bestIou && (best < 0 || u > bestIou)) { best = j; bestIou = u; }
        }
        if (best >= 0) {
          used[best] = 1;
          pa.push(i);
          pb.push(best);
          iouSum += bestIou;
          iouMin = Math.min(iouMin, bestIou);
        }
      }
      orig += ra;
      cand += rb;
      matched += pa.length;
      for (const n of floats) {
        sums[n] = sums[n] || new precision.ErrorSums();
        sums[n].add(gatherRows(A[n], pa, ra), gatherRows(B[n], pb, rb));
      }
      for (const n of ints) errs[n] = { exact: true };  // equal on every matched row
    }
    const figure = orig === 0 && cand === 0 ? 1 : Math.min(orig ? matched / orig : 0, cand ? matched / cand : 0);
    errs[boxes] = { detection: figure, matched, original_rows: orig, candidate_rows: cand,
      mean_iou: matched ? iouSum / matched : 1, min_iou: matched ? iouMin : 1,
      detail: `${matched} of ${orig} original and ${cand} optimized detections matched` };
    for (const [n, s] of Object.entries(sums)) errs[n] = s.result();
  }
  return errs;
}

async function errors(ort, job) {
  const sets = precision.readInputSets(job.sets);
  const out = { levels: {}, kernels: {}, errors: {} };
  for (const level of job.levels || ['disabled']) {
    const so = precision.sessionOptions(level);
    const res = (out.levels[level] = {});
    let reference;
    try {
      reference = await precision.runSets(ort, job.original, sets, so);
    } catch (e) {
      out.errors[`original/${level}`] = errorText(e);
      continue;
    }
    for (const [key, file] of Object.entries(job.cells)) {
      try {
        const got = await precision.runSets(ort, file, sets, so);
        res[key] = (job.detection || []).length ? compareDetections(reference, got, job.detection)
          : precision.compareRuns(reference, got);
      } catch (e) {
        out.errors[`${key}/${level}`] = errorText(e);
      }
    }
  }
  for (const [key, file] of Object.entries(job.cells)) {
    if (/fp16/.test(key)) continue;
    try {
      out.kernels[key] = await precision.ortIntegerKernels(ort, file);
    } catch (e) {
      out.errors[`${key}/kernels`] = errorText(e);
    }
  }
  return out;
}

async function latency(ort, job) {
  const sets = precision.readInputSets(job.sets);
  const opts = { reps: job.reps || 40, warmup: job.warmup ?? 5, minTimeMs: job.minTimeMs ?? 2000 };
  const out = { cpu: cpuInfo(), load_before: fs.readFileSync('/proc/loadavg', 'utf8').trim(), results: {} };
  for (const threads of job.threads || [1]) {
    const so = { ...precision.sessionOptions(job.level || 'all'), intraOpNumThreads: threads };
    for (const [key, file] of Object.entries(job.pairs)) {
      const log = (m) => console.error(`${key}, ${threads} thread(s): ${m}`);
      try {
        const a0 = await ort.InferenceSession.create(file, so);
        const b0 = await ort.InferenceSession.create(job.base, so);
        const { as, bs } = await moreSessions(ort, file, a0, job.base, b0, job.sessions || 4, so);
        try {
          const t = await timeInterleaved(as, precision.feedsFor(ort, a0, sets[0]), bs,
            precision.feedsFor(ort, b0, sets[0]), opts, log);
          out.results[`${key}@${threads}`] = { key, threads, level: job.level || 'all', opt_ms: median(t.a),
            base_ms: median(t.b), ratio: t.ratio, runs: t.a.length, sessions: as.length };
        } finally {
          for (const s of [...as, ...bs]) await s.release();
        }
      } catch (e) {
        out.results[`${key}@${threads}`] = { key, threads, error: errorText(e) };
      }
    }
  }
  out.load_after = fs.readFileSync('/proc/loadavg', 'utf8').trim();
  return out;
}

async function main() {
  const [mode, jobFile] = process.argv.slice(2);
  if (!['errors', 'latency'].includes(mode) || !jobFile) {
    console.error('usage: node --expose-gc ort_cells.js errors|latency JOB.json');
    process.exit(2);
  }
  const job = JSON.parse(fs.readFileSync(jobFile, 'utf8'));
  const ort = loadOrt();
  const res = mode === 'errors' ? await errors(ort, job) : await latency(ort, job);
  res.onnxruntime_node = require(require.resolve('onnxruntime-node/package.json', { paths: [ORT_DIR] })).version;
  console.log(JSON.stringify(res));
}

main().catch((e) => {
  console.error(`ort_cells: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
