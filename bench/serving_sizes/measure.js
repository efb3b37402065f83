// The serving bench's measurements under ONNX Runtime (onnxruntime-node), driven by ./run.
//
//   node --expose-gc measure.js pairs JOB.json   latency, session creation, errors, ORT's graph
//   node --expose-gc measure.js rss FILE SETS_DIR THREADS RUNS   peak RSS of one served model
//
// `pairs` JOB: { original, variants: {key: file}, sets: DIR (test_data_set_K/input_N.pb),
// threads: [1, 2], level: 'all', reps, warmup, minTimeMs, sessions, creates, ortGraphs: DIR }.
// For each variant against the original: latency at each thread count (paired sessions,
// interleaved runs, the geometric mean of per-pair median ratios: bench/ort_parity's
// timeInterleaved), session creation (timeCreates: alternating pairs, median ratio), the error
// of every output over all input sets (bench/ort_precision's compareRuns: max_abs, rel, cosine;
// non-float outputs exact), and the op counts of the graph ORT optimizes each file to at the
// job's level (optimizedModelFilePath). Prints one JSON object on stdout; progress on stderr.
//
// `rss` runs in a process of its own per file: it loads ORT, creates one session with THREADS
// intra-op threads, runs the first input set RUNS times and prints { base_kb, peak_kb }, the
// process's resident size before the session and its peak (VmHWM) after.

'use strict';

const fs = require('fs');
const path = require('path');
const precision = require('../ort_precision/precision');
const { timeInterleaved, moreSessions, timeCreates, median, errorText, cpuInfo } = require('../ort_parity/ort_common');

const ORT_DIR = path.join(__dirname, '..', 'ort_precision');

function loadOrt() {
  const where = process.env.ORT_NODE_MODULES ? [process.env.ORT_NODE_MODULES] : [ORT_DIR];
  return require(require.resolve('onnxruntime-node', { paths: where }));
}

const options = (level, threads) => ({ ...precision.sessionOptions(level), intraOpNumThreads: threads });

async function ortGraph(ort, file, level, outFile) {
  const s = await ort.InferenceSession.create(file, { ...options(level, 1), optimizedModelFilePath: outFile });
  await s.release();
  return precision.runPython(['inspect', outFile]).ops || {};
}

async function pairs(ort, job) {
  const sets = precision.readInputSets(job.sets);
  const level = job.level || 'all';
  const opts = { reps: job.reps ?? 20, warmup: job.warmup ?? 3, minTimeMs: job.minTimeMs ?? 3000 };
  const out = { cpu: cpuInfo(), load_before: fs.readFileSync('/proc/loadavg', 'utf8').trim(), variants: {}, original: {} };
  const log = (m) => console.error(`  ${m}`);

  let reference = null;
  try {
    reference = await precision.runSets(ort, job.original, sets, options(level, 1));
  } catch (e) {
    out.original.error = errorText(e);
    return out;
  }
  if (job.ortGraphs) {
    try {
      out.original.ort_ops = await ortGraph(ort, job.original, level, path.join(job.ortGraphs, 'original.ort.onnx'));
    } catch (e) {
      out.original.ort_ops_error = errorText(e);
    }
  }
  for (const [key, file] of Object.entries(job.variants)) {
    const v = (out.variants[key] = { latency: {}, errors: null });
    try {
      v.errors = precision.compareRuns(reference, await precision.runSets(ort, file, sets, options(level, 1)));
    } catch (e) {
      v.error = errorText(e);
      continue; // a file ORT cannot run is not timed
    }
    if (job.ortGraphs) {
      try {
        v.ort_ops = await ortGraph(ort, file, level, path.join(job.ortGraphs, `${key}.ort.onnx`));
      } catch (e) {
        v.ort_ops_error = errorText(e);
      }
    }
    for (const threads of job.threads || [1]) {
      const so = options(level, threads);
      try {
        const a0 = await ort.InferenceSession.create(file, so);
        const b0 = await ort.InferenceSession.create(job.original, so);
        const { as, bs } = await moreSessions(ort, file, a0, job.original, b0, job.sessions ?? 2, so);
        try {
          const t = await timeInterleaved(as, precision.feedsFor(ort, a0, sets[0]), bs,
            precision.feedsFor(ort, b0, sets[0]), opts, (m) => log(`${key}, ${threads} thread(s): ${m}`));
          v.latency[threads] = { ms: median(t.a), original_ms: median(t.b), ratio: t.ratio, runs: t.a.length,
            sessions: as.length };
        } finally {
          for (const s of [...as, ...bs]) await s.release();
        }
      } catch (e) {
        v.latency[threads] = { error: errorText(e) };
      }
    }
    if (job.creates) {
      try {
        log(`${key}: session creation, ${job.creates} each`);
        const c = await timeCreates(ort, file, job.original, job.creates, options(level, 1));
        v.create = { ms: median(c.a), original_ms: median(c.b), ratio: c.ratio };
      } catch (e) {
        v.create = { error: errorText(e) };
      }
    }
  }
  out.load_after = fs.readFileSync('/proc/loadavg', 'utf8').trim();
  return out;
}

// From /proc/self/status: VmRSS (resident now) or VmHWM (the peak). Not getrusage's ru_maxrss,
// which Linux carries across execve: a child of a large process reports its parent's peak.
function statusKb(field) {
  const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(fs.readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) : null;
}

async function rss(ort, file, setsDir, threads, runs) {
  const set = precision.readInputSets(setsDir)[0];
  const base = statusKb('VmRSS');
  const s = await ort.InferenceSession.create(file, options('all', threads));
  const feeds = precision.feedsFor(ort, s, set);
  for (let i = 0; i < runs; i++) await s.run(feeds);
  const peak = statusKb('VmHWM');
  await s.release();
  return { base_kb: base, peak_kb: peak };
}

async function main() {
  const [mode, ...args] = process.argv.slice(2);
  const ort = loadOrt();
  let res;
  if (mode === 'pairs' && args.length === 1) {
    res = await pairs(ort, JSON.parse(fs.readFileSync(args[0], 'utf8')));
  } else if (mode === 'rss' && args.length === 4) {
    res = await rss(ort, args[0], args[1], Number(args[2]), Number(args[3]));
  } else {
    console.error('usage: node --expose-gc measure.js pairs JOB.json | rss FILE SETS_DIR THREADS RUNS');
    process.exit(2);
  }
  res.onnxruntime_node = require(require.resolve('onnxruntime-node/package.json',
    { paths: process.env.ORT_NODE_MODULES ? [process.env.ORT_NODE_MODULES] : [ORT_DIR] })).version;
  console.log(JSON.stringify(res));
}

main().catch((e) => {
  console.error(`measure: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
