// Times kv_attention.py's two forms against each other under ONNX Runtime 'all', interleaved
// (runs alternate, the order swapped every pair), at decode sizes (one query after a past of
// 256 and 1024) and a 128-token prompt, at 1 and 2 threads; checks the outputs are equal. No
// garbage collection between runs: with it, one-thread runs of a few hundred microseconds took
// milliseconds on this machine (both forms alike).
//   node bench/serving_sizes/kv_attention.js DIR [--heads 12] [--head-size 64] [--runs 400]
//        [--kv-heads G]   (grouped-query attention: the decomposed form against gqa.onnx)
'use strict';
const path = require('path');
const { median } = require('../ort_parity/ort_common');
const ort = require(require.resolve('onnxruntime-node',
  { paths: [process.env.ORT_NODE_MODULES || path.join(__dirname, '..', 'ort_precision')] }));

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}

async function main() {
  const dir = process.argv[2];
  const n = arg('--heads', 12), hs = arg('--head-size', 64), runs = arg('--runs', 400);
  const g = arg('--kv-heads', n);
  const d = n * hs, dkv = g * hs;
  const fusedName = g === n ? 'mha' : 'gqa';
  const fusedLabel = g === n ? 'MultiHeadAttention' : 'GroupQueryAttention';
  let seed = 1;
  const rand = (k) => Float32Array.from({ length: k }, () => ((seed = (seed * 16807) % 2147483647) / 2147483647) * 2 - 1);
  for (const [s, p] of [[1, 256], [1, 1024], [128, 0]]) {
    for (const threads of [1, 2]) {
      const so = { graphOptimizationLevel: 'all', intraOpNumThreads: threads, interOpNumThreads: 1, logSeverityLevel: 3 };
      const a = await ort.InferenceSession.create(path.join(dir, 'decomposed.onnx'), so);
      const b = await ort.InferenceSession.create(path.join(dir, `${fusedName}.onnx`), so);
      const t = s + p;
      const mask = new Float32Array(s * t);
      for (let i = 0; i < s; i++) for (let j = 0; j < t; j++) if (j > p + i) mask[i * t + j] = -3.4e38;
      const common = {
        q: new ort.Tensor('float32', rand(s * d), [1, s, d]), k: new ort.Tensor('float32', rand(s * dkv), [1, s, dkv]),
        v: new ort.Tensor('float32', rand(s * dkv), [1, s, dkv]),
        past_key: new ort.Tensor('float32', rand(g * p * hs), [1, g, p, hs]),
        past_value: new ort.Tensor('float32', rand(g * p * hs), [1, g, p, hs]),
      };
      const feeds = { ...common, mask: new ort.Tensor('float32', mask, [1, 1, s, t]) };
      const fusedFeeds = g === n ? feeds : {
        ...common, seqlens_k: new ort.Tensor('int32', Int32Array.from([t - 1]), [1]),
        total_sequence_length: new ort.Tensor('int32', Int32Array.from([t]), []),
      };
      const ya = await a.run(feeds), yb = await b.run(fusedFeeds);
      let diff = 0;
      for (const o of ['y', 'present_key', 'present_value'])
        for (let i = 0; i < ya[o].data.length; i++) diff = Math.max(diff, Math.abs(ya[o].data[i] - yb[o].data[i]));
      const time = async (x) => { const t0 = process.hrtime.bigint(); await x.run(x === b ? fusedFeeds : feeds); return Number(process.hrtime.bigint() - t0) / 1e3; };
      for (let i = 0; i < 20; i++) { await time(a); await time(b); }
      const ta = [], tb = [], ratios = [];
      for (let i = 0; i < runs; i++) {
        let x, y;
        if (i % 2) { x = await time(a); y = await time(b); } else { y = await time(b); x = await time(a); }
        ta.push(x); tb.push(y); ratios.push(y / x);
      }
      console.log(`S=${s} past=${p} threads=${threads}: decomposed ${median(ta).toFixed(0)} us, ` +
        `${fusedLabel} ${median(tb).toFixed(0)} us, ratio ${median(ratios).toFixed(3)}, max |diff| ${diff.toExponential(1)}`);
      await a.release(); await b.release();
    }
  }
}
main();
