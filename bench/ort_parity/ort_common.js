'use strict';
// Code shared by the ORT benchmarks (bench/ort_parity, bench/ort_precision,
// bench/ort_serving): a minimal ONNX protobuf reader (node and op counts),
// float16 bit conversions, model discovery, seeded inputs from inputs.json,
// output comparison, the interleaved latency measurement (sessions, pairing,
// medians), session-creation timing and table printing. It does not load
// onnxruntime-node itself: callers pass their `ort`, so each tool uses the copy
// installed in its own folder.

const fs = require('fs');
const path = require('path');

const REPO_ROOT = path.resolve(__dirname, '..', '..');
// The graft CLI the tools use unless told otherwise: the first of these that exists.
const DEFAULT_GRAFT = ['build-rel', 'build', 'build-prof'].map((d) => path.join(REPO_ROOT, d, 'client', 'graft'));

// ---------------------------------------------------------------- minimal ONNX protobuf reader
//
// Node and op counting need only a few length-delimited fields of onnx.proto, so
// the wire format is walked directly instead of decoding whole messages:
//   ModelProto.graph = 7, ModelProto.functions = 25, FunctionProto.node = 7,
//   GraphProto.node = 1, NodeProto.op_type = 4, NodeProto.attribute = 5,
//   NodeProto.domain = 7, AttributeProto.g = 6, AttributeProto.graphs = 11.

function readVarint(buf, pos) {
  let value = 0;
  let scale = 1;
  for (;;) {
    if (pos >= buf.length) throw new Error('truncated protobuf (varint)');
    const b = buf[pos++];
    value += (b & 0x7f) * scale; // plain arithmetic: exact below 2^53, plenty for keys and lengths
    if (b < 0x80) return [value, pos];
    scale *= 128;
  }
}

// Calls fn(fieldNumber, start, end) for each length-delimited field of the
// message in buf[start, end); other wire types are skipped.
function forEachLenField(buf, start, end, fn) {
  let pos = start;
  while (pos < end) {
    let key;
    [key, pos] = readVarint(buf, pos);
    const field = Math.floor(key / 8);
    const wire = key % 8;
    if (wire === 0) [, pos] = readVarint(buf, pos);
    else if (wire === 1) pos += 8;
    else if (wire === 5) pos += 4;
    else if (wire === 2) {
      let len;
      [len, pos] = readVarint(buf, pos);
      if (pos + len > end) throw new Error('truncated protobuf (length-delimited field)');
      fn(field, pos, pos + len);
      pos += len;
    } else throw new Error(`unsupported protobuf wire type ${wire}`);
  }
  if (pos !== end) throw new Error('truncated protobuf');
}

// Calls fn(buf, start, end, where) for every NodeProto of the model in buf, where is
// 'main', 'subgraph' (If/Loop/Scan bodies at any depth, also inside functions) or 'function'
// (a model-local function's own nodes).
function forEachNode(buf, fn) {
  const graph = (start, end, where) =>
    forEachLenField(buf, start, end, (f, s, e) => {
      if (f !== 1) return;
      fn(buf, s, e, where);
      subgraphs(s, e);
    });
  const subgraphs = (start, end) =>
    forEachLenField(buf, start, end, (f, s, e) => {
      if (f !== 5) return;
      forEachLenField(buf, s, e, (af, gs, ge) => {
        if (af === 6 || af === 11) graph(gs, ge, 'subgraph');
      });
    });
  forEachLenField(buf, 0, buf.length, (f, s, e) => {
    if (f === 7) graph(s, e, 'main');
    else if (f === 25)
      forEachLenField(buf, s, e, (ff, ns, ne) => {
        if (ff !== 7) return;
        fn(buf, ns, ne, 'function');
        subgraphs(ns, ne);
      });
  });
}

// Node counts of an .onnx file: main graph, nested subgraphs (If/Loop/Scan
// bodies, at any depth), model-local functions; total is their sum.
function countNodes(file) {
  const counts = { main: 0, subgraph: 0, function: 0 };
  forEachNode(fs.readFileSync(file), (buf, s, e, where) => counts[where]++);
  counts.total = counts.main + counts.subgraph + counts.function;
  return counts;
}

// Op counts of an .onnx file over all its graphs (as countNodes counts nodes), keyed
// 'DOMAIN:OP_TYPE' with the default domain spelled 'ai.onnx' (NodeProto.op_type = 4,
// NodeProto.domain = 7).
function countOps(file) {
  const ops = {};
  forEachNode(fs.readFileSync(file), (buf, start, end) => {
    let op = '';
    let domain = '';
    forEachLenField(buf, start, end, (f, s, e) => {
      if (f === 4) op = buf.toString('utf8', s, e);
      else if (f === 7) domain = buf.toString('utf8', s, e);
    });
    const key = `${domain === '' || domain === 'ai.onnx' ? 'ai.onnx' : domain}:${op}`;
    ops[key] = (ops[key] || 0) + 1;
  });
  return ops;
}

function float32ToFloat16Bits(v) {
  const f32 = new Float32Array([v]);
  const x = new Uint32Array(f32.buffer)[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = ((x >>> 23) & 0xff) - 127 + 15;
  const mant = x & 0x7fffff;
  if (exp <= 0) return sign; // flush tiny values to zero; inputs here are in small ranges
  if (exp >= 31) return sign | 0x7c00;
  return sign | (exp << 10) | (mant >>> 13);
}

function float16BitsToNumber(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 31) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

// ---------------------------------------------------------------- model discovery

// Returns [{name, file, specDirs}] where specDirs are the directories whose
// inputs.json may describe the model (its own first). A file is one model; a
// directory contributes its *.onnx, and when it has none of its own (or with
// recursive) each SUBDIR/model.onnx, named after SUBDIR (ONNX's test-data
// layout). Names are made unique. Targets that do not exist or hold no model are
// reported on stderr (prefixed with tag) and skipped.
function findModels(targets, recursive, tag) {
  const models = [];
  // DIR/model.onnx is named after DIR (ONNX test data), other files after themselves.
  const nameOf = (file) =>
    path.basename(file) === 'model.onnx' ? path.basename(path.dirname(file)) : path.basename(file, '.onnx');
  const onnxIn = (dir) =>
    fs.readdirSync(dir).filter((f) => f.endsWith('.onnx') && fs.statSync(path.join(dir, f)).isFile()).sort();
  for (const t of targets) {
    const st = fs.statSync(t, { throwIfNoEntry: false });
    if (!st) {
      console.error(`${tag}: ${t}: no such file or directory (skipped)`);
      continue;
    }
    if (st.isFile()) {
      const file = path.resolve(t);
      models.push({ name: nameOf(file), file, specDirs: [path.dirname(file)] });
      continue;
    }
    const dir = path.resolve(t);
    const own = onnxIn(dir);
    for (const f of own) models.push({ name: nameOf(path.join(dir, f)), file: path.join(dir, f), specDirs: [dir] });
    if (own.length === 0 || recursive) {
      // ONNX test-data layout: DIR/test_x/model.onnx, named after test_x.
      const subdirs = fs
        .readdirSync(dir, { withFileTypes: true })
        .filter((e) => e.isDirectory())
        .map((e) => e.name)
        .sort();
      for (const sub of subdirs) {
        const file = path.join(dir, sub, 'model.onnx');
        if (fs.existsSync(file)) models.push({ name: sub, file, specDirs: [path.join(dir, sub), dir] });
      }
    }
    if (!models.some((m) => m.file.startsWith(dir + path.sep)))
      console.error(`${tag}: ${t}: no *.onnx (nor */model.onnx) found`);
  }
  // Output files are named after the model: make names unique.
  const seen = new Map();
  for (const m of models) {
    const n = (seen.get(m.name) || 0) + 1;
    seen.set(m.name, n);
    if (n > 1) m.name = `${m.name}-${n}`;
  }
  return models;
}

// ---------------------------------------------------------------- inputs

// mulberry32: small deterministic PRNG, uniform in [0, 1).
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const specCache = new Map();
function readSpecFile(file, tag) {
  if (!specCache.has(file)) {
    let spec = null;
    if (fs.existsSync(file)) {
      try {
        spec = JSON.parse(fs.readFileSync(file, 'utf8'));
      } catch (e) {
        console.error(`${tag}: ${file}: ${e.message} (ignored)`);
      }
    }
    specCache.set(file, spec);
  }
  return specCache.get(file);
}

// The model's entry of the first inputs.json naming it: inputsFile (--inputs),
// then those in model.specDirs. An unreadable file is reported (prefixed with
// tag) and ignored.
function inputSpec(model, inputsFile, tag) {
  const files = model.specDirs.map((d) => path.join(d, 'inputs.json'));
  if (inputsFile) files.unshift(inputsFile);
  for (const file of files) {
    const spec = readSpecFile(file, tag);
    if (spec && spec[model.name]) return spec[model.name];
  }
  return {};
}

const FLOAT_TYPES = new Set(['float32', 'float64', 'float16']);
const ARRAY_OF = {
  float32: Float32Array,
  float64: Float64Array,
  float16: Uint16Array, // raw IEEE half bits
  int8: Int8Array,
  uint8: Uint8Array,
  int16: Int16Array,
  uint16: Uint16Array,
  int32: Int32Array,
  uint32: Uint32Array,
  int64: BigInt64Array,
  uint64: BigUint64Array,
  bool: Uint8Array,
};

// Stores the number v in element i of data (typed for type).
function store(data, type, i, v) {
  if (type === 'int64' || type === 'uint64') data[i] = BigInt(Math.trunc(v));
  else if (type === 'float16') data[i] = float32ToFloat16Bits(v);
  else if (type === 'bool') data[i] = v ? 1 : 0;
  else data[i] = v;
}

// Builds the ORT feeds for the original model's inputs. Random values:
// floats uniform in [-1, 1), integers in [0, 100), bools fair; inputs.json's
// "range": {"input": [lo, hi]} overrides the interval, "values" fixes them.
// Symbolic dims are 1 unless "shapes" gives the input's dims; each such
// choice is pushed to notes, and the names of inputs filled with random
// integers (no "range") to randomInts (for the hint when the model fails).
function makeFeeds(ort, inputMetadata, spec, seed, notes, randomInts) {
  const rand = mulberry32(seed);
  const shapes = spec.shapes || {};
  const values = spec.values || {};
  const ranges = spec.range || {};
  for (const key of new Set([...Object.keys(shapes), ...Object.keys(values), ...Object.keys(ranges)]))
    if (!inputMetadata.some((m) => m.name === key)) notes.push(`inputs.json names '${key}', which is not a model input`);

  const feeds = {};
  for (const m of inputMetadata) {
    if (!m.isTensor) throw new Error(`input '${m.name}' is not a tensor (sequence/map inputs are not supported)`);
    const given = values[m.name];
    const flat = Array.isArray(given) ? given.flat(Infinity) : null;
    let dims;
    if (shapes[m.name]) dims = shapes[m.name].map(Number);
    else if (flat && m.shape.length === 1) dims = [flat.length]; // a list for a vector input sets its length
    else
      dims = m.shape.map((d, i) => {
        if (typeof d === 'number' && d >= 0) return d;
        notes.push(`input '${m.name}' dim ${i} (${d === '' ? 'unnamed' : `'${d}'`}) is symbolic: using 1`);
        return 1;
      });
    const size = dims.reduce((a, b) => a * b, 1);

    if (m.type === 'string') {
      const data = flat ? flat.map(String) : Array.from({ length: size }, () => 'a');
      feeds[m.name] = new ort.Tensor('string', data, dims);
      continue;
    }
    const Ctor = ARRAY_OF[m.type];
    if (!Ctor) throw new Error(`input '${m.name}' has unsupported type ${m.type}`);
    const data = new Ctor(size);
    if (flat) {
      if (flat.length !== size) throw new Error(`inputs.json: '${m.name}' has ${flat.length} values for dims [${dims}]`);
      flat.forEach((v, i) => store(data, m.type, i, v));
    } else if (given !== undefined) {
      for (let i = 0; i < size; i++) store(data, m.type, i, given);
    } else if (m.type === 'bool') {
      for (let i = 0; i < size; i++) data[i] = rand() < 0.5 ? 1 : 0;
    } else {
      const isFloat = FLOAT_TYPES.has(m.type);
      if (!isFloat && !ranges[m.name]) randomInts.push(m.name);
      const [lo, hi] = ranges[m.name] || (isFloat ? [-1, 1] : [0, 100]);
      for (let i = 0; i < size; i++) {
        const v = lo + (hi - lo) * rand();
        store(data, m.type, i, isFloat ? v : Math.floor(v));
      }
    }
    feeds[m.name] = new ort.Tensor(m.type, data, dims);
  }
  return feeds;
}

// Feeds restricted to the session's inputs (a model whose inputs differ is noted).
function feedsFor(session, feeds, who, notes) {
  const out = {};
  for (const name of session.inputNames) {
    if (!(name in feeds)) throw new Error(`${who} has input '${name}' that the original does not have`);
    out[name] = feeds[name];
  }
  for (const name of Object.keys(feeds))
    if (!session.inputNames.includes(name)) notes.push(`${who} has no input '${name}' (not fed)`);
  return out;
}

// ---------------------------------------------------------------- output comparison

const ATOL = 1e-4; // equal when |got - expected| <= ATOL + RTOL * |expected|
const RTOL = 1e-3;

function elementAsNumber(tensor, i) {
  const v = tensor.data[i];
  if (typeof v === 'bigint') return Number(v);
  if (tensor.type === 'float16' && typeof v === 'number' && tensor.data instanceof Uint16Array)
    return float16BitsToNumber(v);
  return Number(v);
}

// Compares one output: {ok, maxErr, kind, reason}. maxErr is the largest
// |got - expected| (Infinity where exactly one side is NaN or the infinities
// differ); it is null, and kind/reason say why, when values cannot be compared.
// With exactIntegers, outputs of other than float types must be equal element by
// element (no tolerance).
function compareTensor(expected, got, exactIntegers) {
  const unlike = (kind, reason) => ({ ok: false, maxErr: null, kind, reason });
  if (expected.type !== got.type) return unlike('type', `type ${expected.type} vs ${got.type}`);
  if (expected.dims.length !== got.dims.length || expected.dims.some((d, i) => d !== got.dims[i]))
    return unlike('dims', `dims [${expected.dims}] vs [${got.dims}]`);
  const n = expected.data.length;
  if (expected.type === 'string') {
    for (let i = 0; i < n; i++) if (expected.data[i] !== got.data[i]) return unlike('strings', `string element ${i} differs`);
    return { ok: true, maxErr: 0 };
  }
  const exact = exactIntegers && !FLOAT_TYPES.has(expected.type);
  let ok = true;
  let maxErr = 0;
  for (let i = 0; i < n; i++) {
    if (exact && expected.data[i] !== got.data[i]) ok = false; // also bigints beyond 2^53
    const e = elementAsNumber(expected, i);
    const g = elementAsNumber(got, i);
    let err;
    if (e === g || (Number.isNaN(e) && Number.isNaN(g))) err = 0;
    else {
      err = Math.abs(g - e);
      if (Number.isNaN(err)) err = Infinity;
    }
    if (err > maxErr) maxErr = err;
    // err 0 covers two NaNs (whose tolerance would be NaN) and equal infinities.
    if (!(err === 0 || (!exact && err <= ATOL + RTOL * Math.abs(e)))) ok = false;
  }
  return { ok, maxErr };
}

// Compares all outputs of the reference run with another run of the same
// feeds: {ok, maxErr, kind, outputs: {name: {ok, maxErr, kind, reason}}};
// maxErr is over the outputs whose values could be compared, kind is the
// first output's that could not (dims, type, missing, strings). options:
// {exactIntegers} (see compareTensor).
function compareOutputs(expected, got, options = {}) {
  const result = { ok: true, maxErr: 0, kind: null, outputs: {} };
  for (const name of Object.keys(expected)) {
    const r = got[name]
      ? compareTensor(expected[name], got[name], !!options.exactIntegers)
      : { ok: false, maxErr: null, kind: 'missing', reason: 'output missing' };
    result.outputs[name] = r;
    if (!r.ok) result.ok = false;
    if (r.maxErr === null) result.kind = result.kind || r.kind;
    else if (r.maxErr > result.maxErr) result.maxErr = r.maxErr;
  }
  return result;
}

// ---------------------------------------------------------------- timing

async function timedRun(session, feeds) {
  if (global.gc) global.gc();
  const t0 = process.hrtime.bigint();
  await session.run(feeds);
  return Number(process.hrtime.bigint() - t0) / 1e6;
}

// Times sessions `as` against sessions `bs` (equal counts, pair j = as[j] and bs[j]) after
// warm-ups. Measured on this kind of machine: sessions of one and the same model differ by up
// to 5% from each other, for the life of the session (where ORT happened to place its buffers),
// so one session per side cannot resolve a few percent; each side has opts.sessions of them
// and the ratio is the geometric mean over the pairs of each pair's median per-run ratio.
// Within a pair the order alternates (A B, B A, ...): whichever runs first was measured
// consistently slower, and counterbalancing cancels that; each per-run ratio is of two
// adjacent runs, so drift cancels too. The garbage collector runs before each timed run
// (node --expose-gc, as ./run starts it) so one run's garbage is not collected inside the next
// run's timing. opts.reps timed runs per side at least, more for fast models so each side gets
// opts.minTimeMs of them (at most kMaxReps).
const kMaxReps = 4000;
async function timeInterleaved(as, aFeeds, bs, bFeeds, opts, log) {
  const warm = [];
  for (let i = 0; i < opts.warmup; i++)
    for (let j = 0; j < as.length; j++) {
      warm.push(await timedRun(as[j], aFeeds));
      warm.push(await timedRun(bs[j], bFeeds));
    }
  const each = warm.length ? median(warm) : 1;
  const reps = Math.min(kMaxReps, Math.max(opts.reps, Math.ceil(opts.minTimeMs / Math.max(each, 1e-3))));
  const rounds = Math.ceil(reps / as.length);
  log(`latency (${opts.warmup} warm-up + ${rounds * as.length} runs each, ${as.length} sessions each)`);
  const ta = [];
  const tb = [];
  const ratios = as.map(() => []);
  for (let i = 0; i < rounds; i++) {
    for (let j = 0; j < as.length; j++) {
      let x, y;
      if ((i + j) % 2 === 0) {
        x = await timedRun(as[j], aFeeds);
        y = await timedRun(bs[j], bFeeds);
      } else {
        y = await timedRun(bs[j], bFeeds);
        x = await timedRun(as[j], aFeeds);
      }
      ta.push(x);
      tb.push(y);
      ratios[j].push(x / y);
    }
  }
  const logMean = ratios.reduce((sum, rs) => sum + Math.log(median(rs)), 0) / ratios.length;
  return { a: ta, b: tb, ratio: Math.exp(logMean) };
}

// `n` sessions of each of two files (created with sessionOptions), created in the order A B B A A B ... so that neither side
// is the one created first more often; the first of each side are given.
async function moreSessions(ort, fileA, firstA, fileB, firstB, n, sessionOptions) {
  const as = [firstA];
  const bs = [firstB];
  for (let j = 1; j < n; j++) {
    if (j % 2 === 1) {
      bs.push(await ort.InferenceSession.create(fileB, sessionOptions));
      as.push(await ort.InferenceSession.create(fileA, sessionOptions));
    } else {
      as.push(await ort.InferenceSession.create(fileA, sessionOptions));
      bs.push(await ort.InferenceSession.create(fileB, sessionOptions));
    }
  }
  return { as, bs };
}

// Cold start: times ort.InferenceSession.create(file, sessionOptions) for fileA and fileB
// alternately, n times each, in pairs whose order alternates (A B, B A, A B, ...) so that
// neither side is created first more often; the garbage collector runs before each create
// and each session is released (untimed) right after. One untimed create of each file
// comes first, so that both are read from the page cache alike. Returns the times in ms
// ({a, b}, pair i = a[i] and b[i]) and ratio, the median of the per-pair ratios a/b.
async function timeCreates(ort, fileA, fileB, n, sessionOptions) {
  const once = async (file) => {
    if (global.gc) global.gc();
    const t0 = process.hrtime.bigint();
    const s = await ort.InferenceSession.create(file, sessionOptions);
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    await s.release();
    return ms;
  };
  await once(fileA);
  await once(fileB);
  const a = [];
  const b = [];
  for (let i = 0; i < n; i++) {
    if (i % 2 === 0) {
      a.push(await once(fileA));
      b.push(await once(fileB));
    } else {
      b.push(await once(fileB));
      a.push(await once(fileA));
    }
  }
  return { a, b, ratio: median(a.map((x, i) => x / b[i])) };
}

// The CPU a figure holds on: its model name and its int8 dot-product support, which decides
// whether ONNX Runtime's int8 kernels pay (AVX-512 VNNI or AVX-VNNI; "avx2 only" without them,
// where int8 can be slower than float).
function cpuInfo() {
  let text = '';
  try {
    text = fs.readFileSync('/proc/cpuinfo', 'utf8');
  } catch (e) {
    return { model: 'unknown', isa: [], int8: 'unknown' };
  }
  const model = (/^model name\s*:\s*(.+)$/m.exec(text) || [])[1] || 'unknown';
  const flags = new Set(((/^flags\s*:\s*(.+)$/m.exec(text) || [])[1] || '').split(/\s+/));
  const isa = ['avx2', 'avx512f', 'avx512_vnni', 'avx_vnni', 'amx_int8'].filter((f) => flags.has(f));
  const int8 = flags.has('avx512_vnni') ? 'AVX-512 VNNI' : flags.has('avx_vnni') ? 'AVX-VNNI'
    : flags.has('avx2') ? 'AVX2 only (no VNNI)' : 'no AVX2';
  return { model: model.trim(), isa, int8 };
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

function errorText(e) {
  return String((e && e.message) || e)
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
    .join(' ');
}

function fmtErr(x) {
  if (x === null || x === undefined) return '-';
  if (!Number.isFinite(x)) return String(x);
  return x === 0 ? '0' : x.toExponential(1);
}

const fmtMs = (x) => (x >= 100 ? x.toFixed(1) : x >= 10 ? x.toFixed(2) : x.toFixed(3));

// Prints rows (arrays of strings, the first the header) as aligned columns, a dashed line
// under the header: the columns whose indices are in `left` (default the first) left-aligned,
// the others right-aligned.
function printTable(rows, left = [0]) {
  const widths = rows[0].map((_, c) => Math.max(...rows.map((row) => row[c].length)));
  const line = (row) =>
    row
      .map((cell, c) => (left.includes(c) ? cell.padEnd(widths[c]) : cell.padStart(widths[c])))
      .join('  ')
      .trimEnd();
  console.log(line(rows[0]));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const row of rows.slice(1)) console.log(line(row));
}

// A command-line integer of at least `min`; otherwise `fail` (which exits) is called with why.
function integerArg(name, value, min, fail) {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) fail(`${name} needs an integer >= ${min}, got '${value}'`);
  return n;
}

module.exports = {
  REPO_ROOT,
  DEFAULT_GRAFT,
  ATOL,
  RTOL,
  integerArg,
  readVarint,
  forEachLenField,
  forEachNode,
  countNodes,
  countOps,
  float32ToFloat16Bits,
  float16BitsToNumber,
  findModels,
  mulberry32,
  inputSpec,
  makeFeeds,
  feedsFor,
  compareOutputs,
  timedRun,
  timeInterleaved,
  moreSessions,
  timeCreates,
  median,
  cpuInfo,
  errorText,
  fmtErr,
  fmtMs,
  printTable,
};
