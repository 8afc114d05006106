// Decision cost per request: the production router (filters, prediction, load cost, near-tie
// pick) over N candidates; a whole decision as the request path makes it (the pool assembles the
// candidates, then decide) at 10 to 10,000 known pods, by model index and shortlist and, side by
// side, scanning every known pod as before; and the node model's prediction alone.
// Run: npm run bench:micro. `node bench/decide.bench.ts --before DIR` adds, in the same run, the
// assembled decisions at 1,000 and 10,000 known pods by another tree's pool and router (e.g. one
// exported with `git archive <commit> | tar -x -C DIR`, node_modules linked), built by this tree's fixture.
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { Bench } from 'tinybench';
import { poolKnowing } from './known-pods.ts';
import { PodPool } from '../agent/pool/pool.ts';
import { PodTelemetry } from '../agent/telemetry/pod-telemetry.ts';
import { NodeModel } from '../agent/predict/node-model.ts';
import { decide } from '../agent/route/router.ts';
import { benchCandidates, benchLeave, benchPolicy, benchRequest } from './decide-fixtures.ts';

const policy = benchPolicy;
const request = benchRequest;
const leave = benchLeave;
const candidates = benchCandidates;

const bench = new Bench({ time: 500 });
// Each task starts from a collected heap (with --expose-gc, as bench:micro runs it), so one task's
// p99 does not pay for the garbage an earlier task left (the scans of 10,000 pods leave megabytes).
const fromCleanHeap = { beforeAll: () => globalThis.gc?.() };

// The machine's own p99 noise, side by side: ~10 µs of arithmetic that allocates nothing. Its p99
// above its mean is preemption by other processes, not the code; a decision's p99 can't beat it.
const noise = new Float64Array(4000).map((_, i) => (i % 97) / 97);
let noiseSink = 0;
bench.add(
  'reference: ~10 µs of arithmetic, no allocation (machine noise)',
  () => {
    let x = 0;
    for (let i = 0; i < noise.length; i++) x += Math.sqrt(noise[i] * i);
    noiseSink += x;
  },
  fromCleanHeap,
);
const sizes = [8, 64, 512];
for (const n of sizes) {
  const list = candidates(n);
  bench.add(
    `decide over ${n} candidates`,
    () => {
      decide({ request, policy, candidates: list, leave, rand: Math.random });
    },
    fromCleanHeap,
  );
}
// A serving agent's state: 30 s of scrapes in the local pods' windows, 300 TTFTs measured at
// each (the model and its calibration have data, as they do after the first minutes of traffic).
const HISTORY_MS = 30_000;
const OBSERVATIONS = 300;
const known = [10, 100, 1000, 10_000];
for (const n of known) {
  const pool = poolKnowing(n, candidates(Math.min(n, 8)), 8, HISTORY_MS, { PodPool, PodTelemetry }, OBSERVATIONS);
  bench.add(
    `assemble + decide, ${n} known pods (model index, peer shortlist)`,
    () => {
      decide({ request, policy, candidates: pool.candidates(request.model), leave, rand: Math.random });
    },
    fromCleanHeap,
  );
  bench.add(
    `assemble + decide, ${n} known pods (scan every pod, before)`,
    () => {
      decide({ request, policy, candidates: pool.candidates(), leave, rand: Math.random });
    },
    fromCleanHeap,
  );
}

const { before } = parseArgs({ options: { before: { type: 'string' } } }).values;
if (before !== undefined) {
  // Built by this tree's fixture from the other tree's pool and telemetry classes: the same pods and histories.
  const oldPool = (await import(resolve(before, 'agent/pool/pool.ts'))) as { PodPool: typeof PodPool };
  const oldTelemetry = (await import(resolve(before, 'agent/telemetry/pod-telemetry.ts'))) as {
    PodTelemetry: typeof PodTelemetry;
  };
  const oldRouter = (await import(resolve(before, 'agent/route/router.ts'))) as { decide: typeof decide };
  const classes = { PodPool: oldPool.PodPool, PodTelemetry: oldTelemetry.PodTelemetry };
  for (const n of [1000, 10_000]) {
    const pool = poolKnowing(n, candidates(8), 8, HISTORY_MS, classes, OBSERVATIONS);
    bench.add(
      `assemble + decide, ${n} known pods (${before})`,
      () => {
        oldRouter.decide({ request, policy, candidates: pool.candidates(request.model), leave, rand: Math.random });
      },
      fromCleanHeap,
    );
  }
}

const model = new NodeModel();
for (let i = 0; i < 100; i++) model.observe('pod', { queued: i % 3, running: i % 16, promptTokens: 200 + i }, 100 + i);
bench.add('node model: predict one pod', () => {
  model.predict('pod', { queued: 1, running: 8, promptTokens: 400 });
});
bench.add('node model: learn one observation', () => {
  model.observe('pod', { queued: 1, running: 8, promptTokens: 400 }, 180);
});

await bench.run();
if (noiseSink < 0) console.log(noiseSink); // keeps the reference loop's work observable
const rows = bench.tasks.map((task) => {
  const n = /over (\d+)/.exec(task.name)?.[1];
  const result = task.result;
  const meanUs = result.state === 'completed' ? result.latency.mean * 1000 : NaN;
  const p99Us = result.state === 'completed' ? (result.latency.p99 ?? NaN) * 1000 : NaN;
  return {
    task: task.name,
    'µs/op': meanUs.toFixed(2),
    'p99 µs': p99Us.toFixed(2),
    'µs/candidate': n ? (meanUs / Number(n)).toFixed(3) : '',
  };
});
console.table(rows);
