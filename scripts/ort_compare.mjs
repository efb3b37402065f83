// Development check (not part of the test suite): runs an original and an optimized model with
// ONNX Runtime (npm's onnxruntime-node, graph optimizations disabled) on the same seeded random
// inputs and prints the largest output difference.
//   npm install --ignore-scripts onnxruntime-node   (in some directory D)
//   NODE_PATH=D/node_modules node scripts/ort_compare.mjs ORIG.onnx OPT.onnx [inputs.json KEY]
import { createRequire } from 'module';
import fs from 'fs';
const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node');

const [orig, opt, specFile, specKey] = process.argv.slice(2);
const spec = specFile ? JSON.parse(fs.readFileSync(specFile, 'utf8'))[specKey] ?? {} : {};
let seed = 12345;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);

const typed = { float32: Float32Array, float64: Float64Array, int64: BigInt64Array,
                int32: Int32Array, bool: Uint8Array };

async function main() {
  const a = await ort.InferenceSession.create(orig, { graphOptimizationLevel: 'disabled' });
  const b = await ort.InferenceSession.create(opt, { graphOptimizationLevel: 'disabled' });
  const feeds = {};
  a.inputNames.forEach((name, i) => {
    const meta = a.inputMetadata?.[i] ?? {};
    const type = meta.type ?? 'float32';
    const shape = spec.shapes?.[name] ??
        (meta.shape ?? []).map((d) => (typeof d === 'number' && d > 0 ? d : 1));
    const n = shape.reduce((x, y) => x * y, 1);
    const [lo, hi] = spec.range?.[name] ?? [-1, 1];
    const Arr = typed[type] ?? Float32Array;
    const data = new Arr(n);
    for (let k = 0; k < n; ++k) {
      const v = spec.values?.[name] ?? lo + (hi - lo) * rand();
      data[k] = type === 'int64' ? BigInt(Math.round(v)) : type === 'bool' ? (v > 0 ? 1 : 0) : v;
    }
    feeds[name] = new ort.Tensor(type, data, shape);
  });
  const ra = await a.run(feeds);
  const rb = await b.run(feeds);
  let worst = 0;
  for (const name of a.outputNames) {
    const x = ra[name].data, y = rb[name].data;
    if (x.length !== y.length) throw new Error(`output ${name}: ${x.length} vs ${y.length} elements`);
    for (let k = 0; k < x.length; ++k) {
      const d = Math.abs(Number(x[k]) - Number(y[k])) / Math.max(1, Math.abs(Number(x[k])));
      if (d > worst || Number.isNaN(d)) worst = d;
    }
  }
  console.log(`${orig}: max relative difference ${worst.toExponential(3)} over ${a.outputNames.length} outputs`);
  if (!(worst <= 1e-4)) process.exit(1);
}
main().catch((e) => { console.error(e.message); process.exit(2); });
