'use strict';
// Parity benchmark: Graft's O2 output against ONNX Runtime's "basic" graph
// optimizations. For each model it compares node counts, checks that Graft's
// output computes the same values as the original under ORT, and times Graft's
// output against ORT-basic's saved output (both run with ORT's optimizations
// disabled, so only the graphs differ). See README.md; run through ./run,
// which installs onnxruntime-node on first use.

const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const {
  DEFAULT_GRAFT,
  ATOL,
  RTOL,
  countNodes,
  findModels,
  inputSpec,
  makeFeeds,
  feedsFor,
  compareOutputs,
  timeInterleaved,
  moreSessions,
  median,
  errorText,
  integerArg,
  fmtErr,
  fmtMs,
  printTable,
} = require('./ort_common');

const TAG = 'ort_parity';
const GRAFT_TIMEOUT_MS = 10 * 60 * 1000;

const USAGE = `usage: bench/ort_parity/run [options] MODEL_DIR_OR_FILE...

Compares Graft (optimize --local --level O2) with ONNX Runtime's basic graph
optimizations: node counts, outputs under ORT, latency under ORT.

A directory contributes its *.onnx files; one with none of its own (or any
directory with --recursive) also contributes each subdirectory's model.onnx,
named after the subdirectory (the layout of ONNX's test data).

options:
  --graft PATH     graft CLI (default: the first that exists of
                   build-rel/client/graft, build/client/graft, build-prof/client/graft)
  --reps N         timed runs of each model, interleaved (default 40)
  --warmup N       untimed runs of each before timing (default 5)
  --min-time MS    more timed runs for fast models, until each side has MS ms
                   of them (default 2000; at most 4000 runs)
  --sessions N     ORT sessions per side, timed in turn (default 4; sessions of
                   one model differ by a few percent from each other)
  --noise-floor    also time ORT-basic's output against a second session of
                   itself (column "A/A": what the ratio reads for equal graphs)
  --seed N         random input seed (default 1)
  --out DIR        where optimized models, logs and parity.json go (default /tmp/ort_parity)
  --recursive      also take subdirectory/model.onnx from every directory given
  --inputs FILE    an inputs.json to consult before the ones beside the models
  -h, --help       this text

Input shapes and values come from --inputs, else inputs.json beside the model
(or in the directory given), e.g. {"model": {"shapes": {"x": [1,3,224,224]},
"values": {"sr": 16000}, "range": {"x": [-0.5, 0.5]}}}. Otherwise declared
static dims are used and symbolic dims are set to 1.

exit status: 0 when every model's outputs are equal, 1 when any mismatch or
failure, 2 on bad arguments.`;

// ---------------------------------------------------------------- arguments

function parseArgs(argv) {
  const opts = {
    graft: null,
    reps: 40,
    warmup: 5,
    minTimeMs: 2000,
    noiseFloor: false,
    sessions: 4,
    seed: 1,
    out: '/tmp/ort_parity',
    recursive: false,
    inputs: null,
    targets: [],
  };
  const intArg = (name, v, min) => integerArg(name, v, min, fail);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) fail(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '-h' || a === '--help') {
      console.log(USAGE);
      process.exit(0);
    } else if (a === '--graft') opts.graft = next();
    else if (a === '--reps') opts.reps = intArg(a, next(), 1);
    else if (a === '--warmup') opts.warmup = intArg(a, next(), 0);
    else if (a === '--min-time') opts.minTimeMs = intArg(a, next(), 0);
    else if (a === '--noise-floor') opts.noiseFloor = true;
    else if (a === '--sessions') opts.sessions = intArg(a, next(), 1);
    else if (a === '--seed') opts.seed = intArg(a, next(), 0);
    else if (a === '--out') opts.out = next();
    else if (a === '--recursive') opts.recursive = true;
    else if (a === '--inputs') opts.inputs = path.resolve(next());
    else if (a.startsWith('-') && a !== '-') fail(`unknown option ${a}`);
    else opts.targets.push(a);
  }
  if (opts.targets.length === 0) fail('no model or directory given');
  if (opts.graft === null) {
    opts.graft = DEFAULT_GRAFT.find((p) => fs.existsSync(p));
    if (!opts.graft) fail(`no graft binary found (looked for ${DEFAULT_GRAFT.join(', ')}); pass --graft PATH`);
  }
  if (opts.inputs !== null && !fs.existsSync(opts.inputs)) fail(`--inputs: ${opts.inputs} does not exist`);
  opts.graft = path.resolve(opts.graft);
  try {
    fs.accessSync(opts.graft, fs.constants.X_OK);
  } catch {
    fail(`graft binary ${opts.graft} does not exist or is not executable`);
  }
  return opts;
}

function fail(msg) {
  console.error(`ort_parity: ${msg}\n\n${USAGE}`);
  process.exit(2);
}

// ---------------------------------------------------------------- ORT helpers

// Sessions used for running: ORT's own graph optimizations off and one
// thread, so that outputs and timings reflect the graph as written.
const RUN_OPTIONS = {
  graphOptimizationLevel: 'disabled',
  intraOpNumThreads: 1,
  interOpNumThreads: 1,
  executionMode: 'sequential',
  logSeverityLevel: 4, // fatal only: errors are caught and reported per model
};

// ---------------------------------------------------------------- one model

// Failure kinds, most fundamental first; a model's "failure" is the first of
// these it met (its "errors" has every message).
const FAILURE_KINDS = {
  read: 'cannot read the input model',
  graft: 'Graft failed',
  ort_original: 'ORT cannot load or run the original',
  ort_graft_output: "ORT cannot load or run Graft's output",
  ort_basic: 'ORT basic failed',
  latency: 'latency runs failed',
  internal: 'internal error of this script',
};

function newResult(model) {
  return {
    name: model.name,
    file: model.file,
    nodes: { input: null, graft: null, ort_basic: null }, // totals over all graphs
    node_detail: {}, // {main, subgraph, function, total} per file
    graft: { exit: null, signal: null, ms: null, error: null, log: null }, // ms: wall time of the graft process
    ort_basic: { error: null },
    equal: null, // true / false; null when the check could not run
    max_err: null,
    mismatch_kind: null, // dims / type / missing / strings: some output could not be compared by value
    outputs: null,
    ort_basic_equal: null, // sanity check: ORT-basic's output against the original
    latency: null,
    failure: null, // a FAILURE_KINDS key
    failures: [],
    errors: [], // "stage: message" for each failure
    notes: [],
  };
}

async function runModel(ort, model, opts, log) {
  const r = newResult(model);
  const failed = (kind, msg) => {
    r.failures.push(kind);
    // ORT usually fails the same way for the basic and the unoptimized
    // session of a model: keep one copy of a message.
    const body = (m) => m.slice(m.indexOf(': ') + 2);
    if (!r.errors.some((m) => body(m) === body(msg))) r.errors.push(msg);
    r.failure = Object.keys(FAILURE_KINDS).find((k) => r.failures.includes(k));
  };
  const out = (suffix) => path.join(opts.out, `${model.name}.${suffix}`);
  const basicFile = out('ort_basic.onnx');
  const graftFile = out('graft.onnx');
  for (const f of [basicFile, graftFile]) fs.rmSync(f, { force: true }); // never pick up a stale result

  try {
    r.node_detail.input = countNodes(model.file);
    r.nodes.input = r.node_detail.input.total;
  } catch (e) {
    failed('read', `read input: ${errorText(e)}`);
  }

  // 1. ORT basic: ORT writes the graph after its basic optimizations.
  log('ORT basic');
  try {
    const s = await ort.InferenceSession.create(model.file, {
      graphOptimizationLevel: 'basic',
      optimizedModelFilePath: basicFile,
      intraOpNumThreads: 1,
      interOpNumThreads: 1,
      logSeverityLevel: 4,
    });
    await s.release();
    if (!fs.existsSync(basicFile)) throw new Error('ORT wrote no optimized model');
    r.node_detail.ort_basic = countNodes(basicFile);
    r.nodes.ort_basic = r.node_detail.ort_basic.total;
  } catch (e) {
    r.ort_basic.error = errorText(e);
    failed('ort_basic', `ORT basic: ${r.ort_basic.error}`);
  }

  // 2. Graft O2, in process (no server).
  log('graft O2');
  const argv = ['optimize', '--local', '--level', 'O2', model.file, '-o', graftFile];
  const t0 = process.hrtime.bigint();
  const p = spawnSync(opts.graft, argv, { encoding: 'utf8', timeout: GRAFT_TIMEOUT_MS, maxBuffer: 64 << 20 });
  r.graft.ms = Number(process.hrtime.bigint() - t0) / 1e6;
  r.graft.exit = p.status;
  r.graft.signal = p.signal;
  r.graft.log = out('graft.log');
  fs.writeFileSync(r.graft.log, `$ ${opts.graft} ${argv.join(' ')}\n${p.stdout || ''}${p.stderr || ''}`);
  if (p.error || p.status !== 0) {
    const why = p.error
      ? errorText(p.error)
      : p.signal
        ? `killed by ${p.signal}`
        : `exit ${p.status}: ${(p.stderr || '').trim().split('\n').pop() || 'no message'}`;
    r.graft.error = why;
    failed('graft', `graft: ${why}`);
  } else if (!fs.existsSync(graftFile)) {
    r.graft.error = 'exit 0 but no output written';
    failed('graft', `graft: ${r.graft.error}`);
  } else {
    try {
      r.node_detail.graft = countNodes(graftFile);
      r.nodes.graft = r.node_detail.graft.total;
    } catch (e) {
      r.graft.error = `unreadable output: ${errorText(e)}`;
      failed('graft', `graft: ${r.graft.error}`);
    }
  }

  // 3. Outputs: original (reference) vs Graft, same random inputs, ORT unoptimized.
  if (r.graft.error !== null) return r;
  let feeds, reference, graftSession, basicSession;
  const randomInts = []; // names of inputs filled with random integers
  try {
    log('outputs');
    const orig = await ort.InferenceSession.create(model.file, RUN_OPTIONS);
    try {
      feeds = makeFeeds(ort, orig.inputMetadata, inputSpec(model, opts.inputs, TAG), opts.seed, r.notes, randomInts);
      reference = await orig.run(feeds);
    } finally {
      await orig.release();
    }
  } catch (e) {
    let hint = '';
    if (randomInts.length)
      hint = ` (hint: integer input(s) ${randomInts.join(', ')} were random in [0, 100); give "values" or "range" in inputs.json)`;
    failed('ort_original', `run original under ORT: ${errorText(e)}${hint}`);
    return r;
  }
  let gFeeds, bFeeds;
  try {
    graftSession = await ort.InferenceSession.create(graftFile, RUN_OPTIONS);
    gFeeds = feedsFor(graftSession, feeds, 'graft output', r.notes);
    const cmp = compareOutputs(reference, await graftSession.run(gFeeds));
    r.equal = cmp.ok;
    r.max_err = cmp.maxErr;
    r.mismatch_kind = cmp.kind;
    r.outputs = cmp.outputs;
    for (const [name, o] of Object.entries(cmp.outputs)) if (o.reason) r.notes.push(`output '${name}': ${o.reason}`);
  } catch (e) {
    failed('ort_graft_output', `run graft output under ORT: ${errorText(e)}`);
  }

  // ORT-basic's output, also run unoptimized: a sanity check of the reference
  // and tolerance (recorded in parity.json) and the baseline for latency.
  if (r.equal !== null && r.ort_basic.error === null) {
    try {
      basicSession = await ort.InferenceSession.create(basicFile, RUN_OPTIONS);
      bFeeds = feedsFor(basicSession, feeds, 'ORT-basic output', r.notes);
      const bcmp = compareOutputs(reference, await basicSession.run(bFeeds));
      r.ort_basic_equal = bcmp.ok;
      if (!bcmp.ok) r.notes.push(`ORT basic's own output differs from the original (${bcmp.kind || `max err ${fmtErr(bcmp.maxErr)}`})`);
    } catch (e) {
      failed('ort_basic', `run ORT-basic output under ORT: ${errorText(e)}`);
    }
  }

  // 4. Latency: Graft's output vs ORT-basic's, interleaved A B A B ... so
  // that drift (thermal, other load) hits both alike.
  if (r.equal !== null && r.ort_basic_equal !== null) {
    try {
      const extra = [];
      try {
        const { as, bs } = await moreSessions(ort, graftFile, graftSession, basicFile, basicSession, opts.sessions, RUN_OPTIONS);
        extra.push(...as.slice(1), ...bs.slice(1));
        const t = await timeInterleaved(as, gFeeds, bs, bFeeds, opts, log);
        r.latency = { graft_ms: median(t.a), ort_basic_ms: median(t.b), ratio: t.ratio, runs: t.a.length,
                      sessions: opts.sessions, graft_runs_ms: t.a, ort_basic_runs_ms: t.b };
        if (opts.noiseFloor) {
          // The same procedure on ORT-basic's output against other sessions of itself: what
          // the ratio reads when the graphs are equal (this machine's noise for this model).
          const again = [];
          for (let j = 0; j < opts.sessions; j++) {
            again.push(await ort.InferenceSession.create(basicFile, RUN_OPTIONS));
            extra.push(again[j]);
          }
          r.latency.noise_floor = (await timeInterleaved(again, bFeeds, bs, bFeeds, opts, log)).ratio;
        }
      } finally {
        for (const x of extra) await x.release();
      }
    } catch (e) {
      failed('latency', `latency runs: ${errorText(e)}`);
    }
  }
  if (graftSession) await graftSession.release();
  if (basicSession) await basicSession.release();
  return r;
}

// ---------------------------------------------------------------- report

// A model passes when Graft's outputs were compared and found equal and
// nothing failed; every other model counts as a mismatch in the last line.
const passed = (r) => r.equal === true && r.failure === null;

function tableRows(results) {
  const header = ['model', 'nodes in', 'graft', 'ort basic', 'outputs equal', 'graft ms', 'ort-basic ms', 'runs', 'ratio'];
  if (results.some((r) => r.latency && r.latency.noise_floor !== undefined)) header.push('A/A');
  const rows = results.map((r) => {
    const n = (x) => (x === null ? '-' : String(x));
    let equal;
    if (r.equal === true) equal = 'yes';
    else if (r.equal === false) equal = `NO(${r.mismatch_kind || fmtErr(r.max_err)})`;
    else if (r.failure === 'ort_original') equal = 'ERR(orig)'; // ORT cannot run the original: no reference
    else if (r.failure === 'ort_graft_output') equal = 'ERR(graft)';
    else equal = '-'; // Graft failed (its column says ERR(exit code)), or worse
    // ERR(exit code), or ERR(out) when graft exited 0 but its output is missing or unreadable.
    let graftNodes = n(r.nodes.graft);
    if (r.graft.error !== null) graftNodes = r.graft.exit === 0 ? 'ERR(out)' : `ERR(${r.graft.exit ?? r.graft.signal ?? '-'})`;
    const basicNodes = r.ort_basic.error !== null ? 'ERR' : n(r.nodes.ort_basic);
    const l = r.latency;
    return [
      r.name,
      n(r.nodes.input),
      graftNodes,
      basicNodes,
      equal,
      l ? fmtMs(l.graft_ms) : '-',
      l ? fmtMs(l.ort_basic_ms) : '-',
      l ? String(l.runs) : '-',
      l ? l.ratio.toFixed(3) : '-',
    ].concat(header.length > 9 ? [l && l.noise_floor !== undefined ? l.noise_floor.toFixed(3) : '-'] : []);
  });
  return [header, ...rows];
}

function summarize(results) {
  // Only models whose outputs are equal: the speed of a wrong graph says nothing.
  const ratios = results.filter((r) => r.latency && r.equal).map((r) => ({ name: r.name, ratio: r.latency.ratio }));
  const worst = ratios.reduce((w, x) => (w === null || x.ratio > w.ratio ? x : w), null);
  return {
    models: results.length,
    nodes_le_ort_basic: results.filter(
      (r) => r.nodes.graft !== null && r.nodes.ort_basic !== null && r.nodes.graft <= r.nodes.ort_basic,
    ).length,
    mismatches: results.filter((r) => !passed(r)).length, // output differences and failures
    output_differences: results.filter((r) => r.equal === false).length,
    failures: Object.fromEntries(
      Object.keys(FAILURE_KINDS).map((k) => [k, results.filter((r) => r.equal !== false && r.failure === k).length]),
    ),
    median_ratio: ratios.length ? median(ratios.map((x) => x.ratio)) : null,
    worst_ratio: worst,
  };
}

// ---------------------------------------------------------------- main

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  let ort;
  try {
    ort = require('onnxruntime-node');
  } catch (e) {
    console.error(`ort_parity: cannot load onnxruntime-node (${errorText(e)}); run through bench/ort_parity/run, which installs it`);
    process.exit(2);
  }
  ort.env.logLevel = 'fatal'; // failures are reported by this script, with context
  const ortVersion = require('onnxruntime-node/package.json').version;

  const models = findModels(opts.targets, opts.recursive, TAG);
  if (models.length === 0) fail('no models found');
  fs.mkdirSync(opts.out, { recursive: true });
  console.error(`ort_parity: ${models.length} model(s), graft ${opts.graft}, onnxruntime-node ${ortVersion}, out ${opts.out}`);

  const results = [];
  for (const [i, model] of models.entries()) {
    const log = (what) => console.error(`[${i + 1}/${models.length}] ${model.name}: ${what}`);
    let r;
    try {
      r = await runModel(ort, model, opts, log);
    } catch (e) {
      // Should not happen (runModel catches per stage), but keep going regardless.
      r = newResult(model);
      r.failure = 'internal';
      r.failures.push('internal');
      r.errors.push(`internal: ${e && e.stack ? e.stack : e}`);
    }
    for (const n of r.notes) console.error(`[${i + 1}/${models.length}] ${model.name}: note: ${n}`);
    if (r.failure) console.error(`[${i + 1}/${models.length}] ${model.name}: FAILED: ${FAILURE_KINDS[r.failure]}`);
    results.push(r);
  }

  const s = summarize(results);
  const json = {
    graft: opts.graft,
    onnxruntime_node: ortVersion,
    level: 'O2',
    reps: opts.reps,
    warmup: opts.warmup,
    min_time_ms: opts.minTimeMs,
    noise_floor: opts.noiseFloor,
    sessions: opts.sessions,
    seed: opts.seed,
    tolerance: { atol: ATOL, rtol: RTOL },
    summary: s,
    models: results,
  };
  fs.writeFileSync(path.join(opts.out, 'parity.json'), JSON.stringify(json, null, 1) + '\n');

  printTable(tableRows(results));
  const failed = results.filter((r) => r.errors.length);
  if (failed.length) {
    console.log('');
    // Long ORT messages are cut here; parity.json has them whole.
    const cut = (m) => (m.length > 400 ? `${m.slice(0, 400)}...` : m);
    for (const r of failed) console.log(`${r.name}: ${r.errors.map(cut).join('; ')}`);
  }
  console.log('');
  if (s.mismatches) {
    // What the mismatch count is made of (a model counts once, under its
    // output difference or else its first failure).
    const parts = [`${s.output_differences} output differences`];
    for (const [k, n] of Object.entries(s.failures)) if (n) parts.push(`${n} ${FAILURE_KINDS[k]}`);
    console.log(`mismatches: ${s.mismatches} = ${parts.join(' + ')}`);
  }
  const R = s.median_ratio === null ? 'n/a' : s.median_ratio.toFixed(3);
  const W = s.worst_ratio === null ? 'n/a' : `${s.worst_ratio.ratio.toFixed(3)} (${s.worst_ratio.name})`;
  console.log(
    `parity: ${s.models} models, nodes <= ORT basic: ${s.nodes_le_ort_basic}, mismatches: ${s.mismatches}, median latency ratio: ${R}, worst: ${W}`,
  );
  process.exitCode = s.mismatches ? 1 : 0;
}

main().catch((e) => {
  console.error(`ort_parity: ${e && e.stack ? e.stack : e}`);
  process.exit(2);
});
