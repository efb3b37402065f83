'use strict';
// ONNX Runtime side of bench/int8_cnn (see README.md there), driven by ./run. onnxruntime-node
// is the copy installed in bench/ort_precision; input sets, ORT runs and the error measure are
// bench/ort_precision's (precision.js), timed runs and medians bench/ort_parity's (ort_common.js).
//
//   node --expose-gc measure.js JOB.json
//
// JOB = { sets: DIR (test_data_set_K/input_I.pb), files: { fp32: FILE, KEY: FILE, ... },
//         threads: [1, 2], rounds: 200, budgetMs: 20000, warmup: 3, sessions: 2, graphs: DIR,
//         allowSpinning: false }
// All sessions: graphOptimizationLevel 'all', interOpNumThreads 1, sequential execution, and
// (unless allowSpinning) intra-op workers that do not spin (session.intra_op.allow_spinning 0).
// Measured on this kind of machine (2 cores), 2 threads: with ORT's default spinning, the
// workers of the sessions that just ran keep spinning and take the second core from the session
// that runs next, so sessions run in turn are slower at 2 threads than at 1 (squeezenet1_1:
// 8.2 ms in turn against 2.5 ms alone); without spinning, 4 sessions in turn time as one alone
// does (4.2 and 3.8 ms), at the cost of waking the workers for each op (3.8 ms against 2.7 ms
// for one session that spins). At 1 thread there are no workers and the setting changes nothing.
//   errors:  each KEY's outputs against fp32's on every input set (1 thread): per output
//            max_abs, rel = max_abs / max |fp32|, cosine (precision.js compareRuns).
//   graphs:  the graph ORT optimizes each file to (1 thread), written once as
//            DIR/KEY.ort_all.onnx (optimizedModelFilePath); ./run counts its ops.
//   latency: at each thread count, every file's sessions run in turn on input set 0, round
//            after round (timeRounds), for JOB.rounds rounds or JOB.budgetMs, whichever ends
//            first: per KEY the median ms and the ratio KEY / fp32.
// Prints one JSON line on stdout; progress on stderr.

const fs = require('fs');
const path = require('path');
const { timedRun, median, cpuInfo, errorText } = require('../ort_parity/ort_common');
const precision = require('../ort_precision/precision');

const ORT_DIR = path.join(__dirname, '..', 'ort_precision');
const MIN_ROUNDS = 5; // even when one round takes longer than the budget

function loadOrt() {
  const ort = require(require.resolve('onnxruntime-node', { paths: [ORT_DIR] }));
  ort.env.logLevel = 'fatal';
  return ort;
}

const log = (m) => console.error(`  ${m}`);

// Runs the sessions of every key in turn, round after round (fp32, o2, int8s, fp32, o2, ...),
// the order rotated by one each round so that no key always runs first or after the same key;
// each per-round ratio is of runs a few hundred ms apart at most, so drift cancels. Each key has
// several sessions, round i using session i % n of each: sessions of one model differ by up to
// 5% for their whole life (see timeInterleaved in ort_common.js), so one session per file cannot
// resolve a few percent. Warm-up: opts.warmup untimed runs of every session. Returns per key
// { ms: median, ratio: geometric mean over the session indices of the median per-round ratio
// key / base, runs }.
async function timeRounds(keys, sessions, feeds, opts) {
  for (let w = 0; w < opts.warmup; w++)
    for (const k of keys) for (const s of sessions[k]) await timedRun(s, feeds[k]);
  const base = keys[0];
  const n = sessions[base].length;
  const times = Object.fromEntries(keys.map((k) => [k, []]));
  const ratios = Object.fromEntries(keys.map((k) => [k, Array.from({ length: n }, () => [])]));
  const start = Date.now();
  let round = 0;
  for (; round < opts.rounds && (round < MIN_ROUNDS || Date.now() - start < opts.budgetMs); round++) {
    const j = round % n;
    const ms = {};
    for (let i = 0; i < keys.length; i++) {
      const k = keys[(i + round) % keys.length];
      ms[k] = await timedRun(sessions[k][j], feeds[k]);
    }
    for (const k of keys) {
      times[k].push(ms[k]);
      ratios[k][j].push(ms[k] / ms[base]);
    }
  }
  log(`${round} rounds in ${((Date.now() - start) / 1000).toFixed(1)} s (${opts.warmup} warm-up runs of ${n} session(s) each first)`);
  const out = {};
  for (const k of keys) {
    const used = ratios[k].filter((r) => r.length);
    const logMean = used.reduce((sum, r) => sum + Math.log(median(r)), 0) / used.length;
    out[k] = { ms: median(times[k]), ratio: Math.exp(logMean), runs: times[k].length };
  }
  return out;
}

function sessionOptions(job, threads) {
  const so = { ...precision.sessionOptions('all'), intraOpNumThreads: threads };
  if (!job.allowSpinning) so.extra = { session: { intra_op: { allow_spinning: '0' } } };
  return so;
}

async function latency(ort, job, keys, set, failures) {
  const out = {};
  for (const threads of job.threads || [1, 2]) {
    const so = sessionOptions(job, threads);
    const sessions = {};
    const feeds = {};
    const live = [];
    for (const k of keys) {
      try {
        sessions[k] = [];
        for (let j = 0; j < (job.sessions || 2); j++) sessions[k].push(await ort.InferenceSession.create(job.files[k], so));
        feeds[k] = precision.feedsFor(ort, sessions[k][0], set);
        live.push(k);
      } catch (e) {
        failures[`${k}@${threads}`] = errorText(e);
      }
    }
    log(`${threads} thread(s): ${live.join(', ')}`);
    if (live[0] === 'fp32' && live.length > 1) {
      try {
        out[threads] = await timeRounds(live, sessions, feeds,
          { rounds: job.rounds || 200, budgetMs: job.budgetMs ?? 20000, warmup: job.warmup ?? 3 });
      } catch (e) {
        out[threads] = { fp32: { error: errorText(e) } };
      }
    }
    for (const k of live) for (const s of sessions[k]) await s.release();
  }
  return out;
}

async function main() {
  const job = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const ort = loadOrt();
  const keys = Object.keys(job.files);
  if (keys[0] !== 'fp32') throw new Error("JOB.files must start with 'fp32'");
  const res = {
    cpu: cpuInfo(),
    onnxruntime_node: require(require.resolve('onnxruntime-node/package.json', { paths: [ORT_DIR] })).version,
    load_before: fs.readFileSync('/proc/loadavg', 'utf8').trim(),
    errors: {},
    graphs: {},
    failures: {},
  };
  const sets = precision.readInputSets(job.sets);
  const so = sessionOptions(job, 1);
  log('outputs on the verification sets');
  const reference = await precision.runSets(ort, job.files.fp32, sets, so);
  for (const k of keys.slice(1)) {
    try {
      res.errors[k] = precision.compareRuns(reference, await precision.runSets(ort, job.files[k], sets, so));
    } catch (e) {
      res.failures[k] = errorText(e);
    }
  }
  for (const k of keys) {
    const file = path.join(job.graphs, `${k}.ort_all.onnx`);
    try {
      const s = await ort.InferenceSession.create(job.files[k], { ...so, optimizedModelFilePath: file });
      await s.release();
      res.graphs[k] = file;
    } catch (e) {
      res.failures[`${k}/graph`] = errorText(e);
    }
  }
  res.latency = await latency(ort, job, keys, sets[0], res.failures);
  res.load_after = fs.readFileSync('/proc/loadavg', 'utf8').trim();
  console.log(JSON.stringify(res));
}

main().catch((e) => {
  console.error(`measure.js: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
