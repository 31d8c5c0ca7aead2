// `npx tsx bench/inference-cost.ts`: CPU time per image of one ONNX Runtime inference (this process's
// CPU time, every thread included) for the session options and batch sizes the detect path could use.
// The figures bench/detect-cost.ts splits by thread are explained by these: under load every image is
// inferred on one thread. Prints; asserts nothing.

import * as ort from 'onnxruntime-node';
import { verifiedModelFile } from '../services/detect/model/model-file.ts';
import { disableOrtTelemetry } from '../services/detect/model/onnx-classifier.ts';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const IMAGES = 60;
const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

interface Variant {
  label: string;
  threads: number;
  batch: number;
  options?: Partial<ort.InferenceSession.SessionOptions>;
  session?: Record<string, unknown>;
}

// The options the detect path uses (onnx-classifier.ts), each variant changing one of them.
const VARIANTS: Variant[] = [
  { label: 'as shipped', threads: 1, batch: 1 },
  { label: 'as shipped', threads: 1, batch: 2 },
  { label: 'as shipped', threads: 1, batch: 4 },
  { label: 'as shipped', threads: 1, batch: 8 },
  { label: 'as shipped', threads: 2, batch: 1 },
  { label: 'as shipped', threads: 2, batch: 4 },
  { label: 'spinning on', threads: 2, batch: 1, session: { intra_op: { allow_spinning: '1' } } },
  { label: "graph 'extended'", threads: 1, batch: 1, options: { graphOptimizationLevel: 'extended' } },
  { label: 'denormals as zero', threads: 1, batch: 1, session: { set_denormal_as_zero: '1' } },
  { label: 'no pre-packing', threads: 1, batch: 1, session: { disable_prepacking: '1' } },
  {
    label: 'no memory arena',
    threads: 1,
    batch: 1,
    options: { enableCpuMemArena: false, enableMemPattern: false },
  },
];

async function measure(file: string, v: Variant): Promise<number> {
  const session = await ort.InferenceSession.create(file, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
    intraOpNumThreads: v.threads,
    interOpNumThreads: 1,
    enableCpuMemArena: true,
    enableMemPattern: true,
    ...v.options,
    extra: { session: { intra_op: { allow_spinning: '0' }, ...v.session } },
  });
  const data = new Float32Array(v.batch * 224 * 224 * 3);
  for (let i = 0; i < data.length; i++) data[i] = (i % 251) / 250;
  const input = new ort.Tensor('float32', data, [v.batch, 224, 224, 3]);
  for (let i = 0; i < 5; i++) await session.run({ input });
  const runs = Math.ceil(IMAGES / v.batch);
  const before = cpuMs();
  for (let i = 0; i < runs; i++) await session.run({ input });
  const perImage = (cpuMs() - before) / (runs * v.batch);
  await session.release();
  return perImage;
}

disableOrtTelemetry();
const file = await verifiedModelFile('mobilenet_v2');
const results = new Map<string, number[]>();
for (let round = 0; round < ROUNDS; round++) {
  for (const v of VARIANTS) {
    const key = `${v.label}, ${v.threads} thread${v.threads > 1 ? 's' : ''}, batch ${v.batch}`;
    results.set(key, [...(results.get(key) ?? []), await measure(file, v)]);
  }
}
console.log(`mobilenet_v2, ms of CPU per image (${ROUNDS} rounds):`);
for (const [key, ms] of results)
  console.log(`  ${key.padEnd(42)} ${ms.map((x) => x.toFixed(2)).join(' / ')}`);
