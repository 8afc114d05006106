// decide()'s tail, side by side: assembled decisions (the pool's candidates, then decide) at N
// known pods by this tree and, with --before DIR, another tree's pool and router, plus loops of
// fixed arithmetic that allocate nothing (the machine's own noise), in alternating blocks in one
// process, so every tree meets the same moments of a shared machine. Each decision is timed alone
// (performance.now(), which allocates nothing; hrtime.bigint() makes a BigInt per reading);
// p50 / p99 / p99.9 over every block. This VM stalls a running thread for 40–50 µs about 2,000
// times a second, so an operation's p99 depends on how long it runs: the reference loops of two
// lengths show that floor. The production image runs the agent with --max-semi-space-size=16
// (Dockerfile); a smaller young generation (2) scavenges more often and shows more of the GC's tail.
// Run: node [--max-semi-space-size=2] bench/decide-tail.ts [--before DIR] [--known 10,100,1000,10000]
//        [--blocks 20] [--block 5000] [--history MS: each local pod's windows hold that much history]
//        [--observations N: TTFTs measured per local pod] [--reference 2000,4000: loop lengths]
import { parseArgs } from 'node:util';
import { poolKnowing, treeAt, type PoolClasses } from './known-pods.ts';
import { PodPool } from '../agent/pool/pool.ts';
import { PodTelemetry } from '../agent/telemetry/pod-telemetry.ts';
import { decide } from '../agent/route/router.ts';
import { benchCandidates, benchLeave, benchPolicy, benchRequest } from './decide-fixtures.ts';
import { loadavg } from 'node:os';

const args = parseArgs({
  options: {
    before: { type: 'string' },
    history: { type: 'string', default: '0' },
    observations: { type: 'string', default: '0' },
    known: { type: 'string', default: '1000,10000' },
    reference: { type: 'string', default: '2000,4000' },
    blocks: { type: 'string', default: '20' },
    block: { type: 'string', default: '5000' },
  },
}).values;
const blocks = Number(args.blocks);
const block = Number(args.block);

interface Arm {
  name: string;
  run: () => void;
  samples: Float64Array;
  n: number;
}

const noise = new Float64Array(4000).map((_, i) => (i % 97) / 97);
let sink = 0;
const referenceOf = (length: number) => () => {
  let x = 0;
  for (let i = 0; i < length; i++) x += Math.sqrt(noise[i] * i);
  sink += x;
};

// Both trees' pools are built by this tree's fixture, from each tree's own pool and telemetry
// classes, so they hold the same pods and histories.
type Tree = { classes: PoolClasses; decide: typeof decide };
const trees: [string, Tree][] = [['now', { classes: { PodPool, PodTelemetry }, decide }]];
if (args.before !== undefined) {
  trees.unshift(['before', await treeAt(args.before)]);
}
const historyMs = Number(args.history);
const observations = Number(args.observations);

const arms: Arm[] = [];
const total = blocks * block;
for (const known of args.known.split(',').map(Number)) {
  for (const [name, tree] of trees) {
    const pool = poolKnowing(known, benchCandidates(Math.min(known, 8)), 8, historyMs, tree.classes, observations);
    const run = () => {
      tree.decide({
        request: benchRequest,
        policy: benchPolicy,
        candidates: pool.candidates(benchRequest.model),
        leave: benchLeave,
        rand: Math.random,
      });
    };
    arms.push({ name: `${name}, ${known} known pods`, run, samples: new Float64Array(total), n: 0 });
  }
}
for (const length of args.reference.split(',').map(Number)) {
  const run = referenceOf(Math.min(length, noise.length));
  arms.push({ name: `reference loop of ${length} (no allocation)`, run, samples: new Float64Array(total), n: 0 });
}

for (const arm of arms) for (let i = 0; i < 5000; i++) arm.run(); // optimised before timing
const load0 = loadavg();
for (let b = 0; b < blocks; b++) {
  for (const arm of arms) {
    for (let i = 0; i < block; i++) {
      const t0 = performance.now();
      arm.run();
      arm.samples[arm.n++] = (performance.now() - t0) * 1000;
    }
  }
}
const load1 = loadavg();
const q = (sorted: Float64Array, p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
console.log(
  `${blocks} blocks × ${block} decisions per arm, alternating, ${historyMs} ms of local history, ${observations} TTFTs measured per local pod; load average ${load0[0].toFixed(2)} → ${load1[0].toFixed(2)}`,
);
console.table(
  arms.map((arm) => {
    const s = arm.samples.slice(0, arm.n).sort();
    return {
      arm: arm.name,
      'p50 µs': q(s, 0.5).toFixed(1),
      'p99 µs': q(s, 0.99).toFixed(1),
      'p99.9 µs': q(s, 0.999).toFixed(1),
      'max µs': s[s.length - 1].toFixed(0),
    };
  }),
);
if (sink < 0) console.log(sink);
