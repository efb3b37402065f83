'use strict';
// Precision benchmark: Graft's lossy passes (convert_fp16 at O3, quantize_dynamic_int8 by
// name) cross-checked under ONNX Runtime. For each model it writes seeded input sets in ONNX
// test-data layout, runs graft, runs the original and each optimized model under ORT on the
// same input sets, and compares the error graft reports with the error ORT computes; it also
// checks the float16 output's Casts, measures sizes and weight bytes, converts a model saved
// with external data, and (last) times the optimized models against the original. See
// README.md; run through ./run, which installs onnxruntime-node on first use.

const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const {
  readVarint,
  float32ToFloat16Bits,
  float16BitsToNumber,
  timeInterleaved,
  moreSessions,
  median,
  errorText,
  integerArg,
} = require('../ort_parity/ort_common');

const REPO_ROOT = path.resolve(__dirname, '..', '..');
const DEFAULT_GRAFT = ['build-rel', 'build', 'build-prof'].map((d) => path.join(REPO_ROOT, d, 'client', 'graft'));
const DEFAULT_MODELS = [
  ...['bert_encoder', 'bert_medium', 'efficientnet_b0', 'resnet18', 'mobilenet_v3_small', 'convnext_tiny',
    'gpt2_decoder', 'llama_block', 'ssdlite320_mobilenet_v3_large'].map((n) => `/tmp/graft-corpus/${n}.onnx`),
  path.resolve(REPO_ROOT, '..', 'shared', 'models'),
];
const PYTHON = process.env.PYTHON || '/usr/bin/python3';
const TOOLS = path.join(__dirname, 'onnx_tools.py');
const GRAFT_TIMEOUT_MS = 15 * 60 * 1000;
const VARIANTS = ['fp16', 'int8', 'int8s', 'int4'];
// The lossy pass each variant adds to the O2 list (fp16 runs O3 instead); int8s (static, QDQ)
// is calibrated on CALIBRATION_SETS sets generated like the verification's with other seeds.
const VARIANT_PASS = { fp16: 'convert_fp16', int8: 'quantize_dynamic_int8', int8s: 'quantize_static_int8',
  int4: 'quantize_weights_int4' };
const CALIBRATION_SETS = 4;
const CALIBRATION_SEED_OFFSET = 1000;

const USAGE = `usage: bench/ort_precision/run [options] [MODEL_DIR_OR_FILE...]

Cross-checks Graft's lossy passes under ONNX Runtime: convert_fp16 (graft --level O3) and
quantize_dynamic_int8 (graft --passes <O2 list>,quantize_dynamic_int8). Without models:
the development corpus (/tmp/graft-corpus) and ../shared/models.

options:
  --graft PATH        graft CLI (default: the first of build-rel/, build/, build-prof/ + client/graft)
  --out DIR           outputs (default /tmp/ort_precision)
  --sets N            input sets per model (default 2)
  --seed N            seed of input set 0 (set K uses seed + K; default 1)
  --inputs FILE       an inputs.json consulted before the ones beside the models (repeatable)
  --variants LIST     fp16,int8,int8s,int4 (default all; int8s = quantize_static_int8, calibrated;
                      int4 = quantize_weights_int4)
  --external NAME     also convert model NAME re-saved with external data (default
                      bert_encoder when it is among the models; 'none' to skip)
  --no-verify-data    do not give graft the input sets even if it has --verify-data
  --reuse             keep graft outputs and reports already in --out (e.g. to time again)
  --int8-option K=V   pass --option quantize_dynamic_int8.K=V to graft (repeatable)
  --int8s-option K=V  pass --option quantize_static_int8.K=V to graft (repeatable)
  --int4-option K=V   pass --option quantize_weights_int4.K=V to graft (repeatable)
  --fp16-option K=V   pass --option convert_fp16.K=V to graft (repeatable)
  --latency LIST      variants to time against the original: int8,int8s,int4,fp16 (default), or none
  --latency-models L  comma-separated model names to time (default: all)
  --baseline B        what latency compares against: original (the fp32 input, default) or o2
                      (graft's exact O2 output: isolates the lossy pass from O2's rewrites)
  --reps N            timed runs per side, per ORT optimization level (default 40)
  --warmup N          untimed runs per side and session first (default 5)
  --min-time MS       more runs for fast models until each side has MS ms (default 2000)
  --sessions N        ORT sessions per side (default 4), paired as in ort_parity
  -h, --help          this text

exit status: 0 when every model ran everywhere, 1 when anything failed (the tables say
what), 2 on bad arguments.`;

// ---------------------------------------------------------------- arguments

function fail(msg) {
  console.error(`ort_precision: ${msg}\n\n${USAGE}`);
  process.exit(2);
}

function parseArgs(argv) {
  const opts = {
    graft: null, out: '/tmp/ort_precision', sets: 2, seed: 1, inputs: [], variants: VARIANTS,
    external: null, verifyData: true, reuse: false, baseline: 'original', int8Options: [], fp16Options: [], int8sOptions: [], int4Options: [], latency: ['int8', 'int8s', 'int4', 'fp16'], latencyModels: null,
    reps: 40, warmup: 5, minTimeMs: 2000, sessions: 4, targets: [],
  };
  const intArg = (name, v, min) => integerArg(name, v, min, fail);
  const listArg = (name, v, allowed) => {
    if (v === 'none') return [];
    const xs = v.split(',').filter(Boolean);
    for (const x of xs) if (!allowed.includes(x)) fail(`${name}: '${x}' is not one of ${allowed.join(', ')}`);
    return xs;
  };
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
    else if (a === '--sets') opts.sets = intArg(a, next(), 1);
    else if (a === '--seed') opts.seed = intArg(a, next(), 0);
    else if (a === '--inputs') opts.inputs.push(path.resolve(next()));
    else if (a === '--variants') opts.variants = listArg(a, next(), VARIANTS);
    else if (a === '--external') opts.external = next();
    else if (a === '--no-verify-data') opts.verifyData = false;
    else if (a === '--reuse') opts.reuse = true;
    else if (a === '--baseline') {
      opts.baseline = next();
      if (!['original', 'o2'].includes(opts.baseline)) fail(`--baseline: '${opts.baseline}' is not original or o2`);
    } else if (a === '--int8-option') opts.int8Options.push(next());
    else if (a === '--fp16-option') opts.fp16Options.push(next());
    else if (a === '--int8s-option') opts.int8sOptions.push(next());
    else if (a === '--int4-option') opts.int4Options.push(next());
    else if (a === '--latency') opts.latency = listArg(a, next(), VARIANTS);
    else if (a === '--latency-models') opts.latencyModels = next().split(',').filter(Boolean);
    else if (a === '--reps') opts.reps = intArg(a, next(), 1);
    else if (a === '--warmup') opts.warmup = intArg(a, next(), 0);
    else if (a === '--min-time') opts.minTimeMs = intArg(a, next(), 0);
    else if (a === '--sessions') opts.sessions = intArg(a, next(), 1);
    else if (a.startsWith('-') && a !== '-') fail(`unknown option ${a}`);
    else opts.targets.push(a);
  }
  if (opts.targets.length === 0) opts.targets = DEFAULT_MODELS;
  if (opts.graft === null) {
    opts.graft = DEFAULT_GRAFT.find((p) => fs.existsSync(p));
    if (!opts.graft) fail(`no graft binary found (looked for ${DEFAULT_GRAFT.join(', ')}); pass --graft PATH`);
  }
  opts.graft = path.resolve(opts.graft);
  for (const f of opts.inputs) if (!fs.existsSync(f)) fail(`--inputs: ${f} does not exist`);
  return opts;
}

function findModels(targets) {
  const models = [];
  for (const t of targets) {
    const st = fs.statSync(t, { throwIfNoEntry: false });
    if (!st) {
      // A missing model is a row with the reason, not a silent skip.
      models.push({ name: path.basename(t, '.onnx'), file: path.resolve(t), specDirs: [path.dirname(path.resolve(t))], missing: true });
      continue;
    }
    const files = st.isFile()
      ? [path.resolve(t)]
      : fs.readdirSync(t).filter((f) => f.endsWith('.onnx')).sort().map((f) => path.resolve(t, f));
    for (const file of files) models.push({ name: path.basename(file, '.onnx'), file, specDirs: [path.dirname(file)] });
  }
  return models;
}

// ---------------------------------------------------------------- helpers around processes

function runPython(args) {
  const p = spawnSync(PYTHON, [TOOLS, ...args], { encoding: 'utf8', maxBuffer: 64 << 20, timeout: GRAFT_TIMEOUT_MS });
  let json = null;
  try {
    json = JSON.parse((p.stdout || '').trim().split('\n').pop());
  } catch {
    /* reported below */
  }
  if (json && json.error) throw new Error(`${args[0]}: ${json.error}`);
  if (p.status !== 0 || !json)
    throw new Error(`${args[0]}: exit ${p.status}: ${((p.stderr || '') + (p.stdout || '')).trim().split('\n').slice(-2).join(' ')}`);
  return json;
}

// The O2 pass list, in order, from `graft passes` (levels O1 and O2), less the passes that run
// only for another target (fuse_onnxruntime: 'target onnxruntime only'), which graft refuses by
// name under its default target onnx (as bench/lossy_coverage builds it).
function o2Passes(graft) {
  const p = spawnSync(graft, ['passes'], { encoding: 'utf8' });
  if (p.status !== 0) throw new Error(`graft passes: exit ${p.status}: ${p.stderr}`);
  const list = [];
  for (const line of p.stdout.split('\n')) {
    const m = /^(\w+)\s+(O[0-3]|name)\s+(.*)/.exec(line);
    if (m && (m[2] === 'O1' || m[2] === 'O2') && !m[3].includes('target onnxruntime only')) list.push(m[1]);
  }
  if (!list.length) throw new Error('graft passes listed no O1/O2 pass');
  return list;
}

function graftHas(graft, flag) {
  const p = spawnSync(graft, ['optimize', '--help'], { encoding: 'utf8' });
  return (p.stdout || '').includes(flag);
}

// Graft's own random-input verification options approximating inputs.json (used only when
// graft cannot take the input sets themselves).
function approxVerifyArgs(spec) {
  const args = ['--verify'];
  for (const [name, dims] of Object.entries(spec.shapes || {})) args.push('--verify-shape', `${name}=${dims.join(',')}`);
  for (const [name, v] of Object.entries(spec.values || {}))
    if (typeof v === 'number') args.push('--verify-value', `${name}=${v}`);
  return args;
}

// ---------------------------------------------------------------- test data (TensorProto) reader

const DATA_TYPES = {
  1: ['float32', Float32Array], 2: ['uint8', Uint8Array], 3: ['int8', Int8Array], 4: ['uint16', Uint16Array],
  5: ['int16', Int16Array], 6: ['int32', Int32Array], 7: ['int64', BigInt64Array], 9: ['bool', Uint8Array],
  10: ['float16', Uint16Array], 11: ['float64', Float64Array], 12: ['uint32', Uint32Array], 13: ['uint64', BigUint64Array],
};

// Reads a serialized onnx.TensorProto with raw_data (as numpy_helper.from_array writes it):
// {name, type, dims, data}.
function readTensorProto(file) {
  const buf = fs.readFileSync(file);
  const t = { name: '', dims: [], dataType: 0, raw: null };
  let pos = 0;
  while (pos < buf.length) {
    let key;
    [key, pos] = readVarint(buf, pos);
    const field = Math.floor(key / 8);
    const wire = key % 8;
    if (wire === 0) {
      let v;
      [v, pos] = readVarint(buf, pos);
      if (field === 1) t.dims.push(v);
      else if (field === 2) t.dataType = v;
    } else if (wire === 2) {
      let len;
      [len, pos] = readVarint(buf, pos);
      const s = pos;
      pos += len;
      if (field === 1) for (let p = s; p < pos; ) { let v; [v, p] = readVarint(buf, p); t.dims.push(v); }
      else if (field === 8) t.name = buf.toString('utf8', s, pos);
      else if (field === 9) t.raw = buf.subarray(s, pos);
    } else if (wire === 1) pos += 8;
    else if (wire === 5) pos += 4;
    else throw new Error(`${file}: unsupported wire type ${wire}`);
  }
  const dt = DATA_TYPES[t.dataType];
  if (!dt) throw new Error(`${file}: unsupported data type ${t.dataType}`);
  if (!t.raw) t.raw = Buffer.alloc(0);
  const [type, Ctor] = dt;
  const copy = new Uint8Array(t.raw.length); // aligned copy
  copy.set(t.raw);
  return { name: t.name, type, dims: t.dims, data: new Ctor(copy.buffer, 0, t.raw.length / Ctor.BYTES_PER_ELEMENT) };
}

function readInputSets(dir) {
  const sets = fs.readdirSync(dir).filter((d) => /^test_data_set_\d+$/.test(d)).sort((a, b) => a.localeCompare(b, 'en', { numeric: true }));
  return sets.map((s) => {
    const files = fs.readdirSync(path.join(dir, s)).filter((f) => /^input_\d+\.pb$/.test(f))
      .sort((a, b) => a.localeCompare(b, 'en', { numeric: true }));
    return files.map((f) => readTensorProto(path.join(dir, s, f)));
  });
}

// Feeds for one session: each input by name, float32 values converted where the session
// wants float16 (keep_io_types=false), and the other way round.
function feedsFor(ort, session, set) {
  const byName = new Map(set.map((t) => [t.name, t]));
  const meta = new Map((session.inputMetadata || []).map((m) => [m.name, m]));
  const feeds = {};
  for (const name of session.inputNames) {
    const t = byName.get(name);
    if (!t) throw new Error(`model input '${name}' has no value in the input set`);
    const want = meta.get(name) && meta.get(name).type;
    let { type, data } = t;
    if (want === 'float16' && type === 'float32') {
      data = Uint16Array.from(data, (v) => float32ToFloat16Bits(v));
      type = 'float16';
    } else if (want === 'float32' && type === 'float16') {
      data = Float32Array.from(data, (h) => float16BitsToNumber(h));
      type = 'float32';
    }
    feeds[name] = new ort.Tensor(type, data, t.dims);
  }
  return feeds;
}

// ---------------------------------------------------------------- errors, as graft computes them

function asNumber(tensor, i) {
  const v = tensor.data[i];
  if (typeof v === 'bigint') return Number(v);
  if (tensor.type === 'float16' && tensor.data instanceof Uint16Array) return float16BitsToNumber(v);
  return Number(v);
}

const isFloat = (type) => type === 'float32' || type === 'float16' || type === 'float64';

// Per output, over all input sets (core/eval/verify.cc): max_abs = largest |a - b| (Infinity
// when one side is non-finite and they differ), rel = max_abs / largest |original|, cosine of
// the two outputs as vectors (finite pairs).
class ErrorSums {
  constructor() {
    Object.assign(this, { maxAbs: 0, maxMag: 0, dot: 0, aa: 0, bb: 0, nonFinite: false, problem: null });
  }

  add(a, b) {
    if (!isFloat(a.type) || !isFloat(b.type)) {
      if (a.type !== b.type) this.problem = `type ${a.type} became ${b.type}`;
      return; // non-float outputs are exact or not; counted by the caller
    }
    if (a.dims.length !== b.dims.length || a.dims.some((d, i) => d !== b.dims[i])) {
      this.problem = `dims [${a.dims}] became [${b.dims}]`;
      return;
    }
    for (let i = 0; i < a.data.length; i++) {
      const x = asNumber(a, i);
      const y = asNumber(b, i);
      if (Number.isFinite(x)) this.maxMag = Math.max(this.maxMag, Math.abs(x));
      if (Number.isFinite(x) && Number.isFinite(y)) {
        this.dot += x * y;
        this.aa += x * x;
        this.bb += y * y;
      }
      if (x === y || (Number.isNaN(x) && Number.isNaN(y))) continue;
      if (Number.isFinite(x) && Number.isFinite(y)) this.maxAbs = Math.max(this.maxAbs, Math.abs(x - y));
      else this.nonFinite = true;
    }
  }

  result() {
    const maxAbs = this.nonFinite ? Infinity : this.maxAbs;
    let cosine;
    if (this.aa === 0 && this.bb === 0) cosine = 1;
    else if (this.aa === 0 || this.bb === 0) cosine = 0;
    else cosine = Math.min(1, Math.max(-1, this.dot / (Math.sqrt(this.aa) * Math.sqrt(this.bb))));
    return { max_abs: maxAbs, rel: maxAbs === 0 ? 0 : maxAbs / Math.max(this.maxMag, 1e-30), cosine, problem: this.problem };
  }
}

// ---------------------------------------------------------------- ORT

const sessionOptions = (level) => ({
  graphOptimizationLevel: level,
  intraOpNumThreads: 1,
  interOpNumThreads: 1,
  executionMode: 'sequential',
  logSeverityLevel: 4,
});
const RUN_OPTIONS = sessionOptions('disabled');

async function runSets(ort, file, sets, options = RUN_OPTIONS) {
  const session = await ort.InferenceSession.create(file, options);
  try {
    const outs = [];
    for (const set of sets) outs.push(await session.run(feedsFor(ort, session, set)));
    return { outs, outputNames: session.outputNames };
  } finally {
    await session.release();
  }
}

// Per output of the reference, over all input sets: ErrorSums' result for float outputs,
// { exact } for the others (which must be equal), { problem: 'missing' } when absent.
function compareRuns(reference, got) {
  const errs = {};
  for (const name of reference.outputNames) {
    const sums = new ErrorSums();
    let exact = true;
    for (let k = 0; k < reference.outs.length; k++) {
      const a = reference.outs[k][name];
      const b = got.outs[k] && got.outs[k][name];
      if (!b) {
        sums.problem = 'missing';
        break;
      }
      if (!isFloat(a.type)) exact = exact && a.data.length === b.data.length && a.data.every((x, i) => x === b.data[i]);
      sums.add(a, b);
    }
    const res = sums.result();
    if (!isFloat(reference.outs[0][name].type)) res.exact = exact;
    errs[name] = res;
  }
  return errs;
}

// What ONNX Runtime makes of a quantized graph at its default level: the integer kernels
// (QLinearConv, QLinearMatMul, QGemm, MatMulIntegerToFloat, MatMulNBits...) of the graph it
// optimizes to (optimizedModelFilePath, written beside FILE as FILE.ort_all.onnx), op -> count.
async function ortIntegerKernels(ort, file) {
  const fused = `${file}.ort_all.onnx`;
  const s = await ort.InferenceSession.create(file, { ...sessionOptions('all'), optimizedModelFilePath: fused });
  await s.release();
  const ops = runPython(['inspect', fused]).ops || {};
  return Object.fromEntries(Object.entries(ops).filter(([k]) =>
    /QLinear|QGemm|MatMulInteger|IntegerToFloat|MatMulNBits|DynamicQuantize|QuantizeLinear|DequantizeLinear|ConvInteger/.test(k)));
}

// ---------------------------------------------------------------- one model

function newResult(model) {
  return { name: model.name, file: model.file, base: model.base || null, original: null, inputs: null,
    graft_inputs: null, variants: {}, errors: [], notes: [] };
}

async function runModel(ort, model, opts, ctx, log) {
  const r = newResult(model);
  if (model.missing) {
    r.errors.push(`model: ${model.file} does not exist`);
    return r;
  }
  const dir = path.join(opts.out, model.name);
  fs.mkdirSync(dir, { recursive: true });

  try {
    r.original = runPython(['inspect', model.file]);
  } catch (e) {
    r.errors.push(`inspect original: ${errorText(e)}`);
  }

  // 1. Input sets in ONNX test-data layout.
  const dataDir = path.join(dir, 'inputs');
  fs.rmSync(dataDir, { recursive: true, force: true });
  const specName = model.base || model.name;
  const specFiles = [...opts.inputs, ...model.specDirs.map((d) => path.join(d, 'inputs.json'))];
  let sets = null;
  let spec = {};
  try {
    r.inputs = runPython(['inputs', model.file, specName, dataDir, '--sets', String(opts.sets), '--seed', String(opts.seed),
      ...specFiles.flatMap((f) => ['--spec', f])]);
    for (const n of r.inputs.notes) r.notes.push(n);
    sets = readInputSets(dataDir);
    if (r.inputs.spec) spec = (JSON.parse(fs.readFileSync(r.inputs.spec, 'utf8'))[specName]) || {};
  } catch (e) {
    r.errors.push(`inputs: ${errorText(e)}`);
  }

  // 2. The original under ORT: the reference.
  let reference = null;
  if (sets) {
    log('original under ORT');
    try {
      reference = await runSets(ort, model.file, sets);
    } catch (e) {
      r.errors.push(`ORT original: ${errorText(e)}`);
    }
  }

  // 3. Each variant: graft, inspect, ORT.
  for (const variant of opts.variants) {
    const v = { file: path.join(dir, `${model.name}.${variant}.onnx`), report: path.join(dir, `${model.name}.${variant}.json`),
      graft: null, inspect: null, graft_errors: null, ort_errors: null, same_inputs: false, error: null, ort_error: null };
    r.variants[variant] = v;
    const reuse = opts.reuse && fs.existsSync(v.file) && fs.existsSync(v.report);
    if (!reuse) for (const f of [v.file, v.report]) fs.rmSync(f, { force: true });
    const argv = ['optimize', '--local'];
    if (variant === 'fp16') argv.push('--level', 'O3');
    else argv.push('--passes', [...ctx.o2, VARIANT_PASS[variant]].join(','));
    for (const o of opts[`${variant}Options`]) argv.push('--option', `${VARIANT_PASS[variant]}.${o}`);
    if (variant === 'int8s' && sets) {
      // Calibration data distinct from the sets the error is measured on.
      const calibrationDir = path.join(dir, 'calibration');
      fs.rmSync(calibrationDir, { recursive: true, force: true });
      try {
        runPython(['inputs', model.file, specName, calibrationDir, '--sets', String(CALIBRATION_SETS),
          '--seed', String(opts.seed + CALIBRATION_SEED_OFFSET), ...specFiles.flatMap((f) => ['--spec', f])]);
        argv.push('--calibration-data', calibrationDir);
      } catch (e) {
        r.notes.push(`calibration inputs: ${errorText(e)} (int8s calibrated on random inputs)`);
      }
    }
    argv.push(model.file, '-o', v.file, '--report', v.report);
    if (sets && opts.verifyData && ctx.verifyData) {
      argv.push('--verify', '--verify-data', dataDir);
      v.same_inputs = true;
    } else argv.push(...approxVerifyArgs(spec));
    log(reuse ? `graft ${variant}: reusing ${v.file}` : `graft ${variant}`);
    const t0 = process.hrtime.bigint();
    const p = reuse ? { status: 0, stdout: '(reused)\n', stderr: '' }
      : spawnSync(opts.graft, argv, { encoding: 'utf8', timeout: GRAFT_TIMEOUT_MS, maxBuffer: 64 << 20 });
    v.graft = { argv, exit: p.status, ms: Number(process.hrtime.bigint() - t0) / 1e6, reused: reuse };
    if (!reuse) fs.writeFileSync(path.join(dir, `${model.name}.${variant}.log`), `$ ${opts.graft} ${argv.join(' ')}\n${p.stdout || ''}${p.stderr || ''}`);
    if (p.error || p.status !== 0 || !fs.existsSync(v.file)) {
      v.error = `graft: ${p.error ? errorText(p.error) : p.signal ? `killed by ${p.signal}` : `exit ${p.status}: ${(p.stderr || '').trim().split('\n').pop() || 'no output written'}`}`;
      continue;
    }
    try {
      const rep = JSON.parse(fs.readFileSync(v.report, 'utf8'));
      const ver = rep.verification || {};
      v.graft_status = ver.status || null;
      v.graft_message = ver.message || null;
      v.lossy_kept = ver.lossy_passes || [];
      v.rolled_back = [...(ver.rolled_back || []), ...(rep.passes || []).filter((x) => x.rollbacks).map((x) => `${x.name}: ${x.rollback_reason}`)];
      v.graft_errors = Object.fromEntries((ver.errors || []).map((e) => [e.output, e]));
      // Nodes convert_fp16 kept float32 on purpose, with its reasons: not islands.
      v.kept_float32 = (rep.passes || []).flatMap((x) => (x.explanations || [])
        .filter((e) => e.rule === 'kept_float32').map((e) => e.node));
    } catch (e) {
      v.error = `graft report: ${errorText(e)}`;
    }
    try {
      const kept = (v.kept_float32 || []).flatMap((n) => ['--kept', n]);
      v.inspect = runPython(['inspect', v.file, ...(variant === 'fp16' ? ['--fp16-check', ...kept] : [])]);
    } catch (e) {
      r.notes.push(`${variant}: inspect: ${errorText(e)}`);
    }
    if (!reference) continue;
    if (variant !== 'fp16') {
      // What ONNX Runtime makes of the quantized graph at its default level: its integer
      // kernels (QLinearConv, QLinearMatMul, QGemm, MatMulIntegerToFloat...) or not.
      try {
        v.ort_fused = await ortIntegerKernels(ort, v.file);
      } catch (e) {
        r.notes.push(`${variant}: ORT optimized graph: ${errorText(e)}`);
      }
    }
    log(`${variant} under ORT`);
    try {
      v.ort_errors = compareRuns(reference, await runSets(ort, v.file, sets));
    } catch (e) {
      v.ort_error = `ORT ${variant}: ${errorText(e)}`;
    }
  }
  return r;
}

// ---------------------------------------------------------------- latency

async function timeModel(ort, r, variant, opts, log, baseFile) {
  const out = {};
  const v = r.variants[variant];
  for (const level of ['disabled', 'all']) {
    const so = sessionOptions(level);
    const sets = readInputSets(path.join(opts.out, r.name, 'inputs'));
    try {
      const a0 = await ort.InferenceSession.create(v.file, so);
      const b0 = await ort.InferenceSession.create(baseFile, so);
      const { as, bs } = await moreSessions(ort, v.file, a0, baseFile, b0, opts.sessions, so);
      try {
        const t = await timeInterleaved(as, feedsFor(ort, a0, sets[0]), bs, feedsFor(ort, b0, sets[0]), opts,
          (m) => log(`${variant} vs fp32, ORT optimizations ${level}: ${m}`));
        out[level] = { variant_ms: median(t.a), fp32_ms: median(t.b), ratio: t.ratio, runs: t.a.length, sessions: as.length };
      } finally {
        for (const s of [...as, ...bs]) await s.release();
      }
    } catch (e) {
      out[level] = { error: errorText(e) };
    }
  }
  return out;
}

// ---------------------------------------------------------------- report

const fmtE = (x) => (x === null || x === undefined ? '-' : typeof x === 'string' ? x : !Number.isFinite(x) ? String(x) : x === 0 ? '0' : x.toExponential(2));
const fmtMB = (b) => (b === null || b === undefined ? '-' : (b / 1e6).toFixed(b >= 1e8 ? 0 : 1));
const ratio = (a, b) => (a === null || a === undefined || !b ? '-' : (a / b).toFixed(3));
const fmtMs = (x) => (x >= 100 ? x.toFixed(1) : x >= 10 ? x.toFixed(2) : x.toFixed(3));

function printTable(rows) {
  const widths = rows[0].map((_, c) => Math.max(...rows.map((row) => String(row[c]).length)));
  const line = (row) => row.map((cell, c) => (c === 0 ? String(cell).padEnd(widths[c]) : String(cell).padStart(widths[c]))).join('  ').trimEnd();
  console.log(line(rows[0]));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const row of rows.slice(1)) console.log(line(row));
}

function structureCell(v) {
  const c = v.inspect && v.inspect.fp16_check;
  if (!c) return '-';
  const bad = c.islands.length + c.noop_casts.length;
  return bad ? `BAD(${c.islands.length} islands, ${c.noop_casts.length} no-op casts)` : `ok(${c.counts.casts_to_float || 0}/${c.counts.casts_to_float16 || 0} casts)`;
}

function ortCell(r, v) {
  if (v.error) return 'ERR(graft)';
  if (r.errors.some((e) => e.startsWith('ORT original'))) return 'ERR(orig)';
  if (v.ort_error) return 'ERR(load/run)';
  return v.ort_errors ? 'ok' : '-';
}

function printModel(r) {
  const o = r.original;
  const head = o ? ` (IR ${o.ir_version}, opset ${Object.entries(o.opsets).map(([d, x]) => (d === 'ai.onnx' ? x : `${d} ${x}`)).join(', ')})` : '';
  const same = Object.values(r.variants).some((v) => v.same_inputs);
  const sets = r.inputs ? r.inputs.sets : 0;
  console.log(`\n== ${r.name}${head}: ${sets} input set(s); graft's errors ${Object.keys(r.variants).length ? (same ? 'on the same input sets' : 'on its own random inputs (NOT the same inputs)') : '-'}`);
  const rows = [['variant', 'MB in', 'MB out', 'size', 'nodes in', 'nodes out', 'weights', 'graft', 'ORT', 'fp16 structure']];
  for (const [name, v] of Object.entries(r.variants)) {
    const i = v.inspect;
    rows.push([name, fmtMB(o && o.disk_bytes), fmtMB(i && i.disk_bytes), ratio(i && i.disk_bytes, o && o.disk_bytes),
      o ? o.nodes : '-', i ? i.nodes : '-', ratio(i && i.weight_bytes, o && o.weight_bytes),
      v.error ? `ERR(${v.graft.exit ?? '-'})` : v.graft_status || '?', ortCell(r, v), name === 'fp16' ? structureCell(v) : '']);
  }
  if (rows.length > 1) printTable(rows);
  const erows = [['output', 'variant', 'graft max_abs', 'ORT max_abs', 'graft rel', 'ORT rel', 'ORT/graft rel', 'graft cos', 'ORT cos']];
  for (const [name, v] of Object.entries(r.variants)) {
    const outs = new Set([...Object.keys(v.graft_errors || {}), ...Object.keys(v.ort_errors || {})]);
    for (const out of outs) {
      const g = (v.graft_errors || {})[out] || {};
      const t = (v.ort_errors || {})[out] || {};
      if (t.exact !== undefined) {
        erows.push([out, name, '-', t.exact ? 'exact' : 'DIFFERS', '-', '-', '-', '-', '-']);
        continue;
      }
      const gr = typeof g.rel === 'number' ? g.rel : null;
      erows.push([out, name, fmtE(g.max_abs), t.problem ? `NO(${t.problem})` : fmtE(t.max_abs), fmtE(g.rel), fmtE(t.rel),
        gr && typeof t.rel === 'number' ? (t.rel / gr).toFixed(2) : gr === 0 && t.rel === 0 ? '1.00' : '-',
        g.cosine === undefined ? '-' : g.cosine.toFixed(6), t.cosine === undefined ? '-' : t.cosine.toFixed(6)]);
    }
  }
  if (erows.length > 1) printTable(erows);
  const msgs = [...r.errors];
  for (const [name, v] of Object.entries(r.variants)) {
    if (v.ort_fused) {
      const ops = Object.entries(v.ort_fused).map(([k, n]) => `${k.replace(/^(ai\.onnx|com\.microsoft):/, '')} ${n}`);
      msgs.push(`${name}: ORT (level all) runs ${ops.length ? ops.join(', ') : 'no integer kernel'}`);
    }
    if (v.error) msgs.push(`${name}: ${v.error}`);
    if (v.ort_error) msgs.push(`${name}: ${v.ort_error}`);
    if (v.rolled_back && v.rolled_back.length) msgs.push(`${name}: graft rolled back ${v.rolled_back.join('; ')}`);
    if (v.lossy_kept && !v.lossy_kept.length && !v.error) msgs.push(`${name}: graft kept no lossy pass (${v.graft_message})`);
    const ext = v.inspect && v.inspect.external_files;
    if (ext && Object.keys(ext).length)
      msgs.push(`${name}: external data ${Object.entries(ext).map(([f, b]) => `${f} ${fmtMB(b)} MB`).join(', ')}; the model references ${fmtMB(v.inspect.external_referenced_bytes)} MB of them`);
    const c = v.inspect && v.inspect.fp16_check;
    if (c) for (const x of [...c.islands, ...c.noop_casts, ...c.notes]) msgs.push(`${name} structure: ${x}`);
  }
  for (const n of r.notes) msgs.push(`note: ${n}`);
  const cut = (m) => (m.length > 500 ? `${m.slice(0, 500)}...` : m);
  for (const m of msgs) console.log(`  ${cut(m)}`);
}

// ---------------------------------------------------------------- main

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  let ort;
  try {
    ort = require('onnxruntime-node');
  } catch (e) {
    console.error(`ort_precision: cannot load onnxruntime-node (${errorText(e)}); run through bench/ort_precision/run`);
    process.exit(2);
  }
  ort.env.logLevel = 'fatal';
  const ortVersion = require('onnxruntime-node/package.json').version;
  fs.mkdirSync(opts.out, { recursive: true });
  try {
    runPython(['selftest']); // the fp16 structure check flags a hand-made island and Cast pair
  } catch (e) {
    console.error(`ort_precision: the fp16 structure check failed its self-test: ${errorText(e)}`);
    process.exit(2);
  }
  const ctx = { o2: o2Passes(opts.graft), verifyData: graftHas(opts.graft, '--verify-data') };
  const models = findModels(opts.targets);
  if (!models.length) fail('no models found');

  // A model re-saved with external data (item: "a model with external data converts").
  const extName = opts.external === null ? (models.some((m) => m.name === 'bert_encoder' && !m.missing) ? 'bert_encoder' : 'none') : opts.external;
  if (extName !== 'none') {
    const src = models.find((m) => m.name === extName);
    const entry = { name: `${extName}.external`, base: extName, file: path.join(opts.out, 'external', `${extName}.onnx`), specDirs: src ? src.specDirs : [] };
    try {
      if (!src) throw new Error(`no model named ${extName}`);
      const res = runPython(['external', src.file, path.join(opts.out, 'external')]);
      entry.saved = res;
    } catch (e) {
      entry.missing = true;
      entry.file = `(external copy of ${extName} failed: ${errorText(e)})`;
    }
    models.push(entry);
  }
  console.error(`ort_precision: ${models.length} model(s), graft ${opts.graft} (${ctx.verifyData ? 'has' : 'lacks'} --verify-data), onnxruntime-node ${ortVersion}, out ${opts.out}`);

  const results = [];
  for (const [i, model] of models.entries()) {
    const log = (what) => console.error(`[${i + 1}/${models.length}] ${model.name}: ${what}`);
    let r;
    try {
      r = await runModel(ort, model, opts, ctx, log);
    } catch (e) {
      r = newResult(model);
      r.errors.push(`internal: ${e && e.stack ? e.stack : e}`);
    }
    if (model.saved) r.notes.push(`re-saved with external data: ${fmtMB(model.saved.model_bytes)} MB model + ${fmtMB(model.saved.data_bytes)} MB ${path.basename(model.file)}.data`);
    results.push(r);
  }

  // Latency last, after every accuracy run (and so as late as possible on a shared machine).
  const load = () => fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  const latency = [];
  const latencyLoad = { before: null, after: null };
  if (opts.latency.length) {
    latencyLoad.before = load();
    for (const r of results) {
      if (r.base || (opts.latencyModels && !opts.latencyModels.includes(r.name))) continue;
      for (const variant of opts.latency) {
        const v = r.variants[variant];
        if (!v || v.error || v.ort_error || !v.ort_errors) continue;
        const log = (m) => console.error(`latency ${r.name}: ${m}`);
        let baseFile = r.file;
        if (opts.baseline === 'o2') {
          baseFile = path.join(opts.out, r.name, `${r.name}.o2.onnx`);
          if (!fs.existsSync(baseFile)) {
            const p = spawnSync(opts.graft, ['optimize', '--local', '--level', 'O2', r.file, '-o', baseFile], { encoding: 'utf8', timeout: GRAFT_TIMEOUT_MS });
            if (p.status !== 0) {
              latency.push({ model: r.name, variant, disabled: { error: `graft O2 baseline: exit ${p.status}` } });
              continue;
            }
          }
        }
        latency.push({ model: r.name, variant, baseline: opts.baseline, ...(await timeModel(ort, r, variant, opts, log, baseFile)) });
      }
    }
    latencyLoad.after = load();
  }

  console.log(`ort_precision: onnxruntime-node ${ortVersion}, graft ${opts.graft}, ${opts.sets} input set(s) from seed ${opts.seed}`);
  for (const r of results) printModel(r);
  if (latency.length) {
    console.log(`\n== latency under ORT (CPU, 1 thread; ratio = optimized / fp32 ${opts.baseline === 'o2' ? "(graft's O2 output)" : '(the original)'}, < 1 is faster; load average ${latencyLoad.before} before, ${latencyLoad.after} after)`);
    const rows = [['model', 'variant', 'fp32 ms', 'opt ms', 'ratio', 'runs', 'fp32 ms (ORT all)', 'opt ms (ORT all)', 'ratio (ORT all)', 'runs ']];
    for (const l of latency) {
      const cells = (x) => (!x ? ['-', '-', '-', '-'] : x.error ? ['ERR', 'ERR', '-', '-'] : [fmtMs(x.fp32_ms), fmtMs(x.variant_ms), x.ratio.toFixed(3), String(x.runs)]);
      rows.push([l.model, l.variant, ...cells(l.disabled), ...cells(l.all)]);
    }
    printTable(rows);
    for (const l of latency) for (const lv of ['disabled', 'all']) if (l[lv] && l[lv].error) console.log(`  ${l.model} ${l.variant} (ORT ${lv}): ${l[lv].error.slice(0, 400)}`);
  }
  const failed = results.filter((r) => r.errors.length || Object.values(r.variants).some((v) => v.error || v.ort_error));
  const bad = results.filter((r) => Object.values(r.variants).some((v) => v.inspect && v.inspect.fp16_check && (v.inspect.fp16_check.islands.length || v.inspect.fp16_check.noop_casts.length)));
  console.log(`\nprecision: ${results.length} models, failures: ${failed.length}${failed.length ? ` (${failed.map((r) => r.name).join(', ')})` : ''}, fp16 structure violations: ${bad.length}${bad.length ? ` (${bad.map((r) => r.name).join(', ')})` : ''}`);
  fs.writeFileSync(path.join(opts.out, 'precision.json'), JSON.stringify({ onnxruntime_node: ortVersion, graft: opts.graft,
    o2_passes: ctx.o2, verify_data: ctx.verifyData, opts, latency_load: latencyLoad, models: results, latency }, null, 1) + '\n');
  process.exitCode = failed.length ? 1 : 0;
}

// bench/lossy_coverage (ort_cells.js) reuses the input sets, ORT runs and error measure.
module.exports = { runPython, readInputSets, feedsFor, ErrorSums, isFloat, sessionOptions, runSets, compareRuns,
  ortIntegerKernels, errorText, CALIBRATION_SETS, CALIBRATION_SEED_OFFSET };

if (require.main === module) {
  main().catch((e) => {
    console.error(`ort_precision: ${e && e.stack ? e.stack : e}`);
    process.exit(2);
  });
}
