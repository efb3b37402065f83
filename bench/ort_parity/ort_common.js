'use strict';
// Code shared by the ORT benchmarks (bench/ort_parity, bench/ort_precision): a
// minimal ONNX protobuf reader (node counts), float16 bit conversions, and the
// interleaved latency measurement (sessions, pairing, medians). It does not
// load onnxruntime-node itself: callers pass their `ort`, so each tool uses the
// copy installed in its own folder.

const fs = require('fs');

// ---------------------------------------------------------------- minimal ONNX protobuf reader
//
// Node counting needs only a few length-delimited fields of onnx.proto, so the
// wire format is walked directly instead of decoding whole messages:
//   ModelProto.graph = 7, ModelProto.functions = 25, FunctionProto.node = 7,
//   GraphProto.node = 1, NodeProto.attribute = 5,
//   AttributeProto.g = 6, AttributeProto.graphs = 11.

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

function countGraph(buf, start, end, counts, bucket) {
  forEachLenField(buf, start, end, (f, s, e) => {
    if (f === 1) {
      counts[bucket]++;
      countNodeSubgraphs(buf, s, e, counts);
    }
  });
}

function countNodeSubgraphs(buf, start, end, counts) {
  forEachLenField(buf, start, end, (f, s, e) => {
    if (f !== 5) return;
    forEachLenField(buf, s, e, (af, gs, ge) => {
      if (af === 6 || af === 11) countGraph(buf, gs, ge, counts, 'subgraph');
    });
  });
}

// Node counts of an .onnx file: main graph, nested subgraphs (If/Loop/Scan
// bodies, at any depth), model-local functions; total is their sum.
function countNodes(file) {
  const buf = fs.readFileSync(file);
  const counts = { main: 0, subgraph: 0, function: 0 };
  forEachLenField(buf, 0, buf.length, (f, s, e) => {
    if (f === 7) countGraph(buf, s, e, counts, 'main');
    else if (f === 25)
      forEachLenField(buf, s, e, (ff, ns, ne) => {
        if (ff === 7) {
          counts.function++;
          countNodeSubgraphs(buf, ns, ne, counts);
        }
      });
  });
  counts.total = counts.main + counts.subgraph + counts.function;
  return counts;
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

// A command-line integer of at least `min`; otherwise `fail` (which exits) is called with why.
function integerArg(name, value, min, fail) {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) fail(`${name} needs an integer >= ${min}, got '${value}'`);
  return n;
}

module.exports = {
  integerArg,
  readVarint,
  forEachLenField,
  countNodes,
  float32ToFloat16Bits,
  float16BitsToNumber,
  timedRun,
  timeInterleaved,
  moreSessions,
  median,
  errorText,
};
