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
//
//   node --expose-gc ort_cells.js latency JOB.json
//     JOB = { sets: DIR, base: FILE, pairs: { KEY: FILE, ... }, threads: [1, 2], level: 'all',
//             reps, warmup, minTimeMs, sessions }
//     Times each pair's model against base (interleaved, paired sessions, ratio = KEY / base)
//     at each thread count on input set 0 and prints one JSON line.

const fs = require('fs');
const path = require('path');
const precision = require('../ort_precision/precision');
const { timeInterleaved, moreSessions, median, errorText } = require('../ort_parity/ort_common');

const ORT_DIR = path.join(__dirname, '..', 'ort_precision');

function loadOrt() {
  const ort = require(require.resolve('onnxruntime-node', { paths: [ORT_DIR] }));
  ort.env.logLevel = 'fatal';
  return ort;
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
        res[key] = precision.compareRuns(reference, await precision.runSets(ort, file, sets, so));
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
  const out = { load_before: fs.readFileSync('/proc/loadavg', 'utf8').trim(), results: {} };
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
