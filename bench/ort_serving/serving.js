'use strict';
// Serving benchmark: what a model optimized by Graft for a runtime target costs and saves
// when ONNX Runtime serves it the way it does by default (graph optimization level 'all').
// For each model and each --targets target, graft writes its O2 output for that target; the
// original and that output are then compared under ORT: latency (paired sessions,
// interleaved, as bench/ort_parity), session creation (cold start), equal outputs, node
// counts and the com.microsoft ops the output uses. See README.md; run through ./run, which
// installs onnxruntime-node on first use.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const {
  DEFAULT_GRAFT,
  ATOL,
  RTOL,
  countNodes,
  countOps,
  findModels,
  inputSpec,
  makeFeeds,
  feedsFor,
  compareOutputs,
  timeInterleaved,
  moreSessions,
  timeCreates,
  median,
  errorText,
  integerArg,
  fmtErr,
  fmtMs,
  printTable,
} = require('../ort_parity/ort_common');

const TAG = 'ort_serving';
const GRAFT_TIMEOUT_MS = 15 * 60 * 1000;
const LEVELS = ['disabled', 'basic', 'extended', 'all']; // ORT's graph optimization levels
const TARGET_RE = /^onnx$|^onnxruntime(:\d+\.\d+)?$/;
const SLOWER = 1.02; // a latency ratio above this counts as slower in the summary
// graft options this tool sets itself, refused in --graft-arg.
const OWN_GRAFT_OPTIONS = ['-o', '--output', '--report', '--target', '--local', '--server'];

const USAGE = `usage: bench/ort_serving/run [options] MODEL_DIR_OR_FILE...

For each model and target T, graft writes its O2 output for T (graft optimize --local
--level O2 --target T); the original and that output are compared under ONNX Runtime at
its default graph optimization level ('all'), one intra-op and one inter-op thread:
latency (paired sessions, interleaved), session creation time (cold start), outputs on
seeded random inputs, node counts and the com.microsoft ops of the output.

A directory contributes its *.onnx files; one with none of its own contributes each
subdirectory's model.onnx, named after the subdirectory (the layout of ONNX's test data).

options:
  --graft PATH         graft CLI (default: the first that exists of
                       build-rel/client/graft, build/client/graft, build-prof/client/graft)
  --out DIR            graft outputs, logs, results.json and table.md (default /tmp/ort_serving)
  --targets LIST       graft --target values, comma separated: onnx, onnxruntime,
                       onnxruntime:MAJOR.MINOR (default onnx,onnxruntime)
  --levels LIST        ORT graph optimization levels to time latency at, comma separated:
                       ${LEVELS.join(', ')}, or none (default all,disabled)
  --reps N             timed runs per side and level, at least (default 40)
  --warmup N           untimed runs per side and session before timing (default 5)
  --min-time MS        more timed runs for fast models, until each side has MS ms of
                       them (default 2000; at most 4000 runs)
  --sessions N         ORT sessions per side, paired and timed in turn (default 4)
  --creates N          session creations per side timed for the cold start, 0 to skip
                       (default 10)
  --seed N             random input seed (default 1)
  --inputs FILE        an inputs.json to consult before the ones beside the models
  --graft-arg X        one more argument for graft optimize (repeatable), e.g.
                       --graft-arg --max-rounds --graft-arg 4
  --models-filter RE   only the models whose name matches the regular expression RE
  -h, --help           this text

Input shapes and values come from --inputs, else inputs.json beside the model (or in
the directory given), e.g. {"model": {"shapes": {"x": [1,3,224,224]}, "values":
{"sr": 16000}, "range": {"x": [-0.5, 0.5]}}}. Otherwise declared static dims are used
and symbolic dims are set to 1.

environment: ORT_NODE_MODULES=DIR  use DIR/onnxruntime-node instead of installing the
pinned version into bench/ort_serving/node_modules.

exit status: 0 when every model's output for every target was produced, ran and
computed the original's values, 1 when anything failed or differed, 2 on bad arguments.`;

// ---------------------------------------------------------------- arguments

function fail(msg) {
  console.error(`${TAG}: ${msg}\n\nrun with --help for the options`);
  process.exit(2);
}

// A comma-separated list of distinct values, each accepted by ok (else fail says why).
function listArg(name, value, ok, allowedText) {
  const xs = value.split(',').map((x) => x.trim());
  if (xs.some((x) => x === '')) fail(`${name}: empty item in '${value}'`);
  for (const x of xs) if (!ok(x)) fail(`${name}: '${x}' is not one of ${allowedText}`);
  const dup = xs.find((x, i) => xs.indexOf(x) !== i);
  if (dup !== undefined) fail(`${name}: '${dup}' is given twice`);
  return xs;
}

function parseArgs(argv) {
  const opts = {
    graft: null,
    out: '/tmp/ort_serving',
    targets: ['onnx', 'onnxruntime'],
    levels: ['all', 'disabled'],
    reps: 40,
    warmup: 5,
    minTimeMs: 2000,
    sessions: 4,
    creates: 10,
    seed: 1,
    inputs: null,
    graftArgs: [],
    modelsFilter: null,
    models: [],
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
    else if (a === '--out') opts.out = path.resolve(next());
    else if (a === '--targets')
      opts.targets = listArg(a, next(), (x) => TARGET_RE.test(x), 'onnx, onnxruntime, onnxruntime:MAJOR.MINOR');
    else if (a === '--levels') {
      const v = next();
      opts.levels = v === 'none' ? [] : listArg(a, v, (x) => LEVELS.includes(x), `${LEVELS.join(', ')} (or none alone)`);
    } else if (a === '--reps') opts.reps = intArg(a, next(), 1);
    else if (a === '--warmup') opts.warmup = intArg(a, next(), 0);
    else if (a === '--min-time') opts.minTimeMs = intArg(a, next(), 0);
    else if (a === '--sessions') opts.sessions = intArg(a, next(), 1);
    else if (a === '--creates') opts.creates = intArg(a, next(), 0);
    else if (a === '--seed') opts.seed = intArg(a, next(), 0);
    else if (a === '--inputs') opts.inputs = path.resolve(next());
    else if (a === '--graft-arg') {
      const x = next();
      const flag = x.split('=')[0];
      if (OWN_GRAFT_OPTIONS.includes(flag)) fail(`--graft-arg: ${flag} is set by this tool (one output per target goes to --out)`);
      opts.graftArgs.push(x);
    } else if (a === '--models-filter') {
      const v = next();
      try {
        opts.modelsFilter = new RegExp(v);
      } catch (e) {
        fail(`--models-filter: '${v}' is not a valid regular expression (${e.message})`);
      }
    } else if (a.startsWith('-') && a !== '-') fail(`unknown option ${a}`);
    else opts.models.push(a);
  }

  if (opts.models.length === 0) fail('no model or directory given');
  for (const m of opts.models)
    if (!fs.existsSync(m)) fail(`${m}: no such file or directory`);

  if (opts.inputs !== null) {
    if (!fs.existsSync(opts.inputs)) fail(`--inputs: ${opts.inputs} does not exist`);
    try {
      JSON.parse(fs.readFileSync(opts.inputs, 'utf8'));
    } catch (e) {
      fail(`--inputs: ${opts.inputs} is not valid JSON (${e.message})`);
    }
  }
  const outStat = fs.statSync(opts.out, { throwIfNoEntry: false });
  if (outStat && !outStat.isDirectory()) fail(`--out: ${opts.out} exists and is not a directory`);

  if (opts.graft === null) {
    opts.graft = DEFAULT_GRAFT.find((p) => fs.existsSync(p));
    if (!opts.graft) fail(`no graft binary found (looked for ${DEFAULT_GRAFT.join(', ')}); pass --graft PATH`);
  }
  opts.graft = path.resolve(opts.graft);
  try {
    fs.accessSync(opts.graft, fs.constants.X_OK);
  } catch {
    fail(`--graft: ${opts.graft} does not exist or is not executable`);
  }
  // The binary must know --target (added with the onnxruntime target) and --report.
  const help = spawnSync(opts.graft, ['optimize', '--help'], { encoding: 'utf8', timeout: 60 * 1000 });
  const helpText = `${help.stdout || ''}${help.stderr || ''}`;
  if (help.error || help.status !== 0) fail(`--graft: '${opts.graft} optimize --help' failed (${help.error ? errorText(help.error) : `exit ${help.status}`})`);
  for (const flag of ['--target', '--report'])
    if (!helpText.includes(flag)) fail(`--graft: ${opts.graft} has no ${flag} option (too old a build?)`);
  return opts;
}

// ---------------------------------------------------------------- ORT

const sessionOptions = (level) => ({
  graphOptimizationLevel: level,
  intraOpNumThreads: 1,
  interOpNumThreads: 1,
  executionMode: 'sequential',
  logSeverityLevel: 4, // fatal only: errors are caught and reported per model
});

// onnxruntime-node from $ORT_NODE_MODULES, else the copy ./run installed beside this script.
function loadOrt() {
  const dir = process.env.ORT_NODE_MODULES;
  const base = dir ? path.join(path.resolve(dir), 'onnxruntime-node') : 'onnxruntime-node';
  let ort;
  try {
    ort = require(base);
  } catch (e) {
    const where = dir ? `ORT_NODE_MODULES=${dir}` : 'bench/ort_serving/node_modules';
    console.error(`${TAG}: cannot load onnxruntime-node from ${where} (${errorText(e)}); run through bench/ort_serving/run, which installs it`);
    process.exit(2);
  }
  ort.env.logLevel = 'fatal'; // failures are reported by this script, with context
  const version = require(`${base}/package.json`).version;
  const pinned = require('./package.json').dependencies['onnxruntime-node'];
  if (version !== pinned) console.error(`${TAG}: warning: onnxruntime-node ${version} is not the pinned ${pinned}`);
  return { ort, version };
}

// ---------------------------------------------------------------- machine

function cpuModel() {
  try {
    const m = /^model name\s*:\s*(.+)$/m.exec(fs.readFileSync('/proc/cpuinfo', 'utf8'));
    if (m) return m[1].trim();
  } catch {
    /* below */
  }
  const cpus = os.cpus();
  return cpus.length ? cpus[0].model : 'unknown';
}

const loadAverage = () => {
  try {
    return fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  } catch {
    return os.loadavg().map((x) => x.toFixed(2)).join(' ');
  }
};

// ---------------------------------------------------------------- one model

// Target T's files are named NAME.T.* with ':' (onnxruntime:1.20) spelled '-'.
const fileTag = (target) => target.replace(/:/g, '-');

function newTarget(target) {
  return {
    target,
    file: null, // graft's output
    report: null, // graft's --report
    log: null, // graft's command line and output
    graft: { argv: null, exit: null, signal: null, ms: null, error: null, report: null },
    nodes: null, // countNodes of the output: {main, subgraph, function, total}
    com_microsoft_ops: null, // {op_type: count}
    other_domain_ops: null, // {domain:op_type: count} of domains other than ai.onnx and com.microsoft
    equal: null, // true / false; null when the outputs could not be compared
    max_err: null,
    mismatch_kind: null, // dims / type / missing / strings: some output could not be compared by value
    outputs: null, // per output {ok, maxErr, kind, reason}
    latency: {}, // per ORT level: {orig_ms, graft_ms, ratio, runs, sessions, ...} or {error}
    create: null, // {orig_ms, graft_ms, ratio, n, ...} or {error}
    errors: [],
  };
}

function newResult(model, targets) {
  return {
    name: model.name,
    file: model.file,
    nodes: null,
    original_error: null, // ORT cannot load or run the original: nothing to compare with
    targets: Object.fromEntries(targets.map((t) => [t, newTarget(t)])),
    notes: [],
    errors: [],
  };
}

// What graft's --report says, in short: its build, what it was asked for and what changed.
function reportSummary(file) {
  const rep = JSON.parse(fs.readFileSync(file, 'utf8'));
  const changed = (rep.passes || []).filter((p) => p.rewrites);
  return {
    graft_version: rep.graft_version ?? null,
    build_fingerprint: rep.build_fingerprint ?? null,
    target: rep.target ?? null,
    nodes_before: rep.nodes_before ?? null,
    nodes_after: rep.nodes_after ?? null,
    rounds: rep.rounds ?? null,
    pipeline_seconds: rep.pipeline_seconds ?? null,
    rewrites: Object.fromEntries(changed.map((p) => [p.name, p.rewrites])),
    rules: Object.fromEntries(changed.filter((p) => p.rules && Object.keys(p.rules).length).map((p) => [p.name, p.rules])),
    rollbacks: (rep.passes || []).filter((p) => p.rollbacks).map((p) => `${p.name}: ${p.rollback_reason}`),
  };
}

function runGraft(model, t, opts) {
  const base = path.join(opts.out, `${model.name}.${fileTag(t.target)}`);
  t.file = `${base}.onnx`;
  t.report = `${base}.json`;
  t.log = `${base}.log`;
  for (const f of [t.file, t.report]) fs.rmSync(f, { force: true }); // never pick up a stale result
  const argv = ['optimize', '--local', '--level', 'O2', '--target', t.target, ...opts.graftArgs, model.file, '-o', t.file, '--report', t.report];
  t.graft.argv = argv;
  const t0 = process.hrtime.bigint();
  const p = spawnSync(opts.graft, argv, { encoding: 'utf8', timeout: GRAFT_TIMEOUT_MS, maxBuffer: 64 << 20 });
  t.graft.ms = Number(process.hrtime.bigint() - t0) / 1e6;
  t.graft.exit = p.status;
  t.graft.signal = p.signal;
  fs.writeFileSync(t.log, `$ ${opts.graft} ${argv.join(' ')}\n${p.stdout || ''}${p.stderr || ''}`);
  let why = null;
  if (p.error) why = errorText(p.error);
  else if (p.signal) why = `killed by ${p.signal}`;
  else if (p.status !== 0) why = `exit ${p.status}: ${(p.stderr || '').trim().split('\n').pop() || 'no message'}`;
  else if (!fs.existsSync(t.file)) why = 'exit 0 but no output written';
  if (why === null) {
    try {
      t.nodes = countNodes(t.file);
      const ops = countOps(t.file);
      t.com_microsoft_ops = {};
      t.other_domain_ops = {};
      for (const [key, n] of Object.entries(ops)) {
        const [domain, op] = [key.slice(0, key.lastIndexOf(':')), key.slice(key.lastIndexOf(':') + 1)];
        if (domain === 'com.microsoft') t.com_microsoft_ops[op] = n;
        else if (domain !== 'ai.onnx') t.other_domain_ops[key] = n;
      }
    } catch (e) {
      why = `unreadable output: ${errorText(e)}`;
    }
  }
  if (why !== null) {
    t.graft.error = why;
    t.errors.push(`graft: ${why} (log: ${t.log})`);
    return;
  }
  try {
    t.graft.report = reportSummary(t.report);
  } catch (e) {
    t.errors.push(`graft report ${t.report}: ${errorText(e)}`);
  }
}

async function runModel(ort, model, opts, log) {
  const r = newResult(model, opts.targets);
  const targets = Object.values(r.targets);
  try {
    r.nodes = countNodes(model.file);
  } catch (e) {
    r.errors.push(`read input: ${errorText(e)}`);
  }

  // 1. Graft, once per target (all before any timing: graft keeps a core busy).
  for (const t of targets) {
    log(`graft O2 --target ${t.target}`);
    runGraft(model, t, opts);
  }
  const produced = targets.filter((t) => t.graft.error === null);
  if (!produced.length) return r;

  // 2. The reference: the original under ORT at level 'all', on seeded random inputs.
  const all = sessionOptions('all');
  let feeds, reference;
  const randomInts = []; // names of inputs filled with random integers
  try {
    log('original under ORT');
    const orig = await ort.InferenceSession.create(model.file, all);
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
    r.original_error = `${errorText(e)}${hint}`;
    r.errors.push(`run original under ORT: ${r.original_error}`);
    return r;
  }

  // 3. Each output on the same inputs, also at level 'all'.
  const compared = [];
  for (const t of produced) {
    log(`outputs (${t.target})`);
    try {
      const s = await ort.InferenceSession.create(t.file, all);
      try {
        t.feeds = feedsFor(s, feeds, `graft output (${t.target})`, r.notes);
        const cmp = compareOutputs(reference, await s.run(t.feeds), { exactIntegers: true });
        t.equal = cmp.ok;
        t.max_err = cmp.maxErr;
        t.mismatch_kind = cmp.kind;
        t.outputs = cmp.outputs;
        for (const [name, o] of Object.entries(cmp.outputs))
          if (o.reason) r.notes.push(`${t.target}: output '${name}': ${o.reason}`);
        compared.push(t);
      } finally {
        await s.release();
      }
    } catch (e) {
      t.errors.push(`run graft output under ORT: ${errorText(e)}`);
    }
  }

  // 4. Latency at each level: graft's output (A) against the original (B), ort_parity's method.
  for (const t of compared) {
    for (const level of opts.levels) {
      const so = sessionOptions(level);
      const sessions = [];
      try {
        const a0 = await ort.InferenceSession.create(t.file, so);
        sessions.push(a0);
        const b0 = await ort.InferenceSession.create(model.file, so);
        sessions.push(b0);
        const { as, bs } = await moreSessions(ort, t.file, a0, model.file, b0, opts.sessions, so);
        sessions.push(...as.slice(1), ...bs.slice(1));
        const m = await timeInterleaved(as, t.feeds, bs, feeds, opts, (x) => log(`${t.target}, ORT ${level}: ${x}`));
        t.latency[level] = { orig_ms: median(m.b), graft_ms: median(m.a), ratio: m.ratio, runs: m.a.length,
                             sessions: as.length, orig_runs_ms: m.b, graft_runs_ms: m.a };
      } catch (e) {
        t.latency[level] = { error: errorText(e) };
        t.errors.push(`latency (ORT ${level}): ${t.latency[level].error}`);
      } finally {
        for (const s of sessions) await s.release();
      }
    }
  }

  // 5. Cold start: InferenceSession.create from the file, level 'all', alternately.
  if (opts.creates > 0)
    for (const t of compared) {
      log(`session creation (${t.target}): ${opts.creates} each`);
      try {
        const c = await timeCreates(ort, t.file, model.file, opts.creates, all);
        t.create = { orig_ms: median(c.b), graft_ms: median(c.a), ratio: c.ratio, n: c.a.length,
                     orig_runs_ms: c.b, graft_runs_ms: c.a };
      } catch (e) {
        t.create = { error: errorText(e) };
        t.errors.push(`session creation: ${t.create.error}`);
      }
    }
  for (const t of targets) delete t.feeds;
  return r;
}

// ---------------------------------------------------------------- report

// A (model, target) passes when graft's output was compared, found equal and nothing failed.
const passed = (r, t) => r.errors.length === 0 && t.errors.length === 0 && t.equal === true;

function opsCell(t) {
  if (!t.com_microsoft_ops) return '-';
  const ops = Object.entries(t.com_microsoft_ops).sort((x, y) => y[1] - x[1] || x[0].localeCompare(y[0]));
  return ops.length ? ops.map(([op, n]) => `${op} ${n}`).join(', ') : '-';
}

function equalCell(r, t) {
  if (t.equal === true) return `yes (${fmtErr(t.max_err)})`;
  if (t.equal === false) return `NO(${t.mismatch_kind || fmtErr(t.max_err)})`;
  if (t.graft.error !== null) return '-'; // the nodes column says ERR
  if (r.original_error !== null) return 'ERR(orig)'; // no reference
  return 'ERR(graft)'; // ORT cannot load or run graft's output
}

function tableRows(results, opts) {
  const header = ['model', 'target', 'nodes orig→graft', 'ms orig/graft (all)',
    ...opts.levels.map((l) => `latency ratio (${l})`), 'create ms orig/graft', 'create ratio', 'outputs equal', 'com.microsoft ops'];
  const rows = [];
  for (const r of results)
    for (const t of Object.values(r.targets)) {
      const orig = r.nodes ? String(r.nodes.total) : 'ERR';
      let graft = t.nodes ? String(t.nodes.total) : '-';
      if (t.graft.error !== null) graft = t.graft.exit === 0 ? 'ERR(out)' : `ERR(${t.graft.exit ?? t.graft.signal ?? '-'})`;
      const la = t.latency.all;
      const ratio = (x) => (!x ? '-' : x.error ? 'ERR' : x.ratio.toFixed(3));
      const c = t.create;
      rows.push([
        r.name,
        t.target,
        `${orig}→${graft}`,
        la && !la.error ? `${fmtMs(la.orig_ms)}/${fmtMs(la.graft_ms)}` : la ? 'ERR' : '-',
        ...opts.levels.map((l) => ratio(t.latency[l])),
        c && !c.error ? `${fmtMs(c.orig_ms)}/${fmtMs(c.graft_ms)}` : c ? 'ERR' : '-',
        ratio(c),
        equalCell(r, t),
        opsCell(t),
      ]);
    }
  return [header, ...rows];
}

// Per target, over the models whose output computed the original's values (the speed of a
// wrong graph says nothing).
function summarize(results, opts) {
  const summary = {};
  for (const target of opts.targets) {
    const pairs = results.map((r) => ({ r, t: r.targets[target] }));
    const ok = pairs.filter(({ t }) => t.equal === true);
    const latency = (level) => ok.filter(({ t }) => t.latency[level] && !t.latency[level].error)
      .map(({ r, t }) => ({ model: r.name, ratio: t.latency[level].ratio }));
    const all = latency('all');
    const worst = all.reduce((w, x) => (w === null || x.ratio > w.ratio ? x : w), null);
    const creates = ok.filter(({ t }) => t.create && !t.create.error).map(({ t }) => t.create.ratio);
    const slower = all.filter((x) => x.ratio > SLOWER).map((x) => x.model);
    summary[target] = {
      models: pairs.length,
      equal: ok.length,
      failed: pairs.filter(({ r, t }) => !passed(r, t)).map(({ r }) => r.name),
      median_latency_ratio: Object.fromEntries(opts.levels.map((l) => {
        const xs = latency(l).map((x) => x.ratio);
        return [l, xs.length ? median(xs) : null];
      })),
      max_latency_ratio_all: worst,
      median_create_ratio: creates.length ? median(creates) : null,
      slower_than: SLOWER,
      slower: slower, // models whose latency ratio at level 'all' is above SLOWER
      timed_all: all.length,
    };
  }
  return summary;
}

function summaryRows(summary, opts) {
  const f = (x) => (x === null || x === undefined ? '-' : x.toFixed(3));
  const header = ['target', 'models', 'outputs equal', 'median latency ratio (all)', 'max latency ratio (all)',
    ...opts.levels.filter((l) => l !== 'all').map((l) => `median latency ratio (${l})`),
    'median create ratio', `slower than ${SLOWER} (all)`];
  const rows = Object.entries(summary).map(([target, s]) => [
    target,
    String(s.models),
    String(s.equal),
    f(s.median_latency_ratio.all),
    s.max_latency_ratio_all ? `${f(s.max_latency_ratio_all.ratio)} (${s.max_latency_ratio_all.model})` : '-',
    ...opts.levels.filter((l) => l !== 'all').map((l) => f(s.median_latency_ratio[l])),
    f(s.median_create_ratio),
    `${s.slower.length} of ${s.timed_all}${s.slower.length ? ` (${s.slower.join(', ')})` : ''}`,
  ]);
  return [header, ...rows];
}

function markdownTable(rows, left) {
  const esc = (cell) => cell.replace(/\|/g, '\\|');
  const lines = [`| ${rows[0].map(esc).join(' | ')} |`, `|${rows[0].map((_, c) => (left.includes(c) ? '---' : '---:')).join('|')}|`];
  for (const row of rows.slice(1)) lines.push(`| ${row.map(esc).join(' | ')} |`);
  return lines.join('\n');
}

// Every failure message, "model (target): message" ("(target): message" without withName),
// long ORT messages cut at `cut` characters (0: whole).
function failureLines(results, cut, withName = true) {
  const c = (m) => (cut && m.length > cut ? `${m.slice(0, cut)}...` : m);
  const lines = [];
  for (const r of results) {
    const name = withName ? r.name : '';
    for (const e of r.errors) lines.push(`${name}${name ? ': ' : ''}${c(e)}`);
    for (const t of Object.values(r.targets))
      for (const e of t.errors) lines.push(`${name}${name ? ' ' : ''}(${t.target}): ${c(e)}`);
  }
  return lines;
}

// ---------------------------------------------------------------- main

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const { ort, version: ortVersion } = loadOrt();
  if (!global.gc) console.error(`${TAG}: warning: node runs without --expose-gc (./run passes it): garbage may be collected inside timed runs`);

  let models = findModels(opts.models, false, TAG);
  for (const m of opts.models) {
    const dir = path.resolve(m);
    if (fs.statSync(m).isDirectory() && !models.some((x) => x.file.startsWith(dir + path.sep)))
      fail(`${m}: no *.onnx (nor */model.onnx) in this directory`);
  }
  if (opts.modelsFilter) {
    const all = models;
    models = models.filter((m) => opts.modelsFilter.test(m.name));
    if (!models.length) fail(`--models-filter ${opts.modelsFilter} matches none of the models (${all.map((m) => m.name).join(', ')})`);
  }
  fs.mkdirSync(opts.out, { recursive: true });

  const started = new Date();
  const machine = { cpu: cpuModel(), cores: os.cpus().length, node: process.version, onnxruntime_node: ortVersion,
    platform: `${os.platform()} ${os.release()}`, load_before: loadAverage(), load_after: null };
  console.error(`${TAG}: ${models.length} model(s) x ${opts.targets.length} target(s), graft ${opts.graft}, onnxruntime-node ${ortVersion}, node ${process.version}, out ${opts.out}`);

  const results = [];
  for (const [i, model] of models.entries()) {
    const log = (what) => console.error(`[${i + 1}/${models.length}] ${model.name}: ${what}`);
    let r;
    try {
      r = await runModel(ort, model, opts, log);
    } catch (e) {
      // Should not happen (runModel catches per stage), but keep going regardless.
      r = newResult(model, opts.targets);
      r.errors.push(`internal: ${e && e.stack ? e.stack : e}`);
    }
    for (const n of r.notes) log(`note: ${n}`);
    for (const l of failureLines([r], 0, false)) log(`FAILED: ${l}`);
    results.push(r);
  }
  machine.load_after = loadAverage();

  const summary = summarize(results, opts);
  const graftBuild = results.flatMap((r) => Object.values(r.targets)).map((t) => t.graft.report).find(Boolean) || {};
  const json = {
    tool: 'bench/ort_serving',
    date: started.toISOString(),
    machine,
    graft: { path: opts.graft, version: graftBuild.graft_version ?? null, build_fingerprint: graftBuild.build_fingerprint ?? null,
             level: 'O2', args: opts.graftArgs },
    options: { targets: opts.targets, levels: opts.levels, reps: opts.reps, warmup: opts.warmup, min_time_ms: opts.minTimeMs,
               sessions: opts.sessions, creates: opts.creates, seed: opts.seed, inputs: opts.inputs,
               models_filter: opts.modelsFilter ? opts.modelsFilter.source : null, out: opts.out },
    session_options: { graph_optimization_level: 'all (outputs, session creation); --levels (latency)',
                       intra_op_threads: 1, inter_op_threads: 1, execution_mode: 'sequential' },
    tolerance: { atol: ATOL, rtol: RTOL, integers: 'exact' },
    summary,
    models: results,
  };
  fs.writeFileSync(path.join(opts.out, 'results.json'), JSON.stringify(json, null, 1) + '\n');

  const rows = tableRows(results, opts);
  const left = [0, 1, rows[0].length - 2, rows[0].length - 1]; // text columns
  const srows = summaryRows(summary, opts);
  const fails = failureLines(results, 400);

  const buildText = json.graft.version ? `graft ${json.graft.version}${json.graft.build_fingerprint ? ` (build ${json.graft.build_fingerprint.slice(0, 12)})` : ''}` : 'graft';
  const head = [
    `ONNX Runtime ${ortVersion} (onnxruntime-node, CPU), Node ${process.version}, CPU ${machine.cpu} (${machine.cores} cores), ${started.toISOString()}.`,
    `${buildText} \`optimize --local --level O2 --target T${opts.graftArgs.length ? ` ${opts.graftArgs.join(' ')}` : ''}\`; ORT sessions with 1 intra-op and 1 inter-op thread. ` +
      'Ratios are graft/original (below 1 = graft faster). ' +
      (opts.levels.length
        ? `Latency at ORT level ${opts.levels.join(', ')}: ${opts.sessions} paired session(s) per side, at least ${opts.reps} ` +
          `interleaved runs each (--min-time ${opts.minTimeMs} ms), ${opts.warmup} warm-up(s). `
        : 'Latency not measured (--levels none). ') +
      (opts.creates
        ? `Session creation: ${opts.creates} per side at level all, alternating. `
        : 'Session creation not measured (--creates 0). ') +
      `Load average ${machine.load_before} before, ${machine.load_after} after.`,
  ];
  const md = [
    `<!-- generated by bench/ort_serving/run on ${started.toISOString()} -->`,
    ...head.map((l) => `${l}\n`),
    markdownTable(rows, left),
    '',
    markdownTable(srows, [0, srows[0].length - 1]),
    ...(fails.length ? ['', 'Failures:', '', ...fails.map((l) => `- ${l}`)] : []),
    '',
  ].join('\n');
  fs.writeFileSync(path.join(opts.out, 'table.md'), md);

  for (const l of head) console.log(l);
  console.log('');
  printTable(rows, left);
  if (fails.length) {
    console.log('');
    for (const l of fails) console.log(l);
  }
  console.log('');
  printTable(srows, [0, srows[0].length - 1]);
  console.log(`\n${TAG}: wrote ${path.join(opts.out, 'results.json')} and ${path.join(opts.out, 'table.md')}`);
  const bad = results.some((r) => Object.values(r.targets).some((t) => !passed(r, t)));
  process.exitCode = bad ? 1 : 0;
}

main().catch((e) => {
  console.error(`${TAG}: ${e && e.stack ? e.stack : e}`);
  process.exit(2);
});
