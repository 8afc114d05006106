// `npm run bench:routing-prefix`: the prefix-sharing workloads (multi-turn chat, shared system
// prompt, and a no-sharing control) against the same simulated vLLM pods, with prefix caching on,
// for every routing strategy plus Kinference's prefix-blind self and the GIE profile with its
// prefix-cache scorer. Reports TTFT,
// SLO attainment and the cache hit rate the pods achieved. Writes bench/results/routing-prefix.json.
import { mkdirSync, writeFileSync } from 'node:fs';
import {
  DEFAULT_SHAPE,
  fitOracleModel,
  meanResult,
  percentile,
  POOL_SHAPES,
  runScenario,
  type RunResult,
  type Scenario,
} from './routing/harness.ts';
import { BENCH_STRATEGIES, kinferencePrefixBlind } from './routing/strategies.ts';
import {
  calibrateWorkload,
  multiTurnChat,
  noSharing,
  sharedSystemPrompt,
  ttftFloors,
} from './routing/prefix-workloads.ts';
import { gieProfile } from './routing/gie.ts';
import type { Arrival } from './routing/workload.ts';

const MINUTE = 60_000;
const SEEDS = Number(process.env.SEEDS ?? 3);
const LOAD = Number(process.env.LOAD ?? 0.8);
// SEED_FROM=k: seeds k … k+SEEDS−1 (each workload's seed + 1000·i), e.g. held-out seeds after tuning on 0–4.
const SEED_FROM = Number(process.env.SEED_FROM ?? 0);
// SHAPE=<name>: one of bench:routing's pool shapes (harness.ts POOL_SHAPES), default vLLM 16 seqs.
const SHAPE = process.env.SHAPE ? POOL_SHAPES.find((s) => s.name === process.env.SHAPE) : DEFAULT_SHAPE;
if (!SHAPE) throw new Error(`SHAPE must be one of: ${POOL_SHAPES.map((s) => s.name).join('; ')}`);
// Pod speeds (relative); SPEEDS=1,1,0.5,0.25 is bench:routing's heterogeneous pool.
const SPEEDS = (process.env.SPEEDS ?? SHAPE.speeds?.join(',') ?? '1,1,1,1').split(',').map(Number);
type Generator = (seed: number, ms: number, ratePerS: number) => Arrival[];

// The control uses the multi-turn seed: the same arrivals, sizes and times, only nothing repeats.
const WORKLOADS: { name: string; generate: Generator; sloMs: number; seed: number }[] = [
  { name: 'multi-turn chat', generate: multiTurnChat, sloMs: 1000, seed: 21 },
  { name: 'shared system prompt', generate: sharedSystemPrompt, sloMs: 1000, seed: 22 },
  { name: 'no sharing (control)', generate: noSharing, sloMs: 1000, seed: 21 },
];
// STRATEGIES=kinference,GIE runs only the strategies whose names start with one of these.
const picked = process.env.STRATEGIES?.split(',');
const strategies = [
  ...BENCH_STRATEGIES.filter(([name]) => name !== 'peak-EWMA P2C'),
  ['kinference, prefix-blind', kinferencePrefixBlind] as const,
  ['GIE queue+KV+prefix', gieProfile(true)] as const,
].filter(([name]) => !picked || picked.some((p) => name.startsWith(p)));

const FLOOR = 'floor: alone, every earlier block cached';
const only = process.argv[2];
const results: Record<string, Record<string, RunResult>> = {};
const started = performance.now();
for (const w of WORKLOADS) {
  if (only && !w.name.includes(only)) continue;
  const capacity = calibrateWorkload(w.generate, 99, SHAPE);
  // The oracle's TTFT model, fitted on the short-prompt mix: it knows queues, not caches.
  const oracle = fitOracleModel({ longShare: 0 }, capacity, 7, SHAPE);
  const durationMs = 5 * MINUTE;
  console.error(`${w.name}: ${capacity.toFixed(2)} req/s per pod with nothing cached; offered ${LOAD * 100}% of that`);
  results[w.name] = {};
  // The floor: each request alone on a pod holding every block computed before it (prefix-workloads.ts).
  const floors = Array.from({ length: SEEDS }, (_, i) => {
    const total = capacity * SPEEDS.reduce((a, b) => a + b, 0);
    const arrivals = w.generate(w.seed + 1000 * (SEED_FROM + i), durationMs, LOAD * total);
    return ttftFloors(arrivals, SHAPE, SPEEDS).sort((a, b) => a - b);
  });
  const floorAvg = (f: (sorted: number[]) => number) => floors.reduce((s, x) => s + f(x), 0) / SEEDS;
  results[w.name][FLOOR] = {
    requests: floorAvg((x) => x.length),
    rejected: 0,
    p50: floorAvg((x) => percentile(x, 0.5)),
    p90: floorAvg((x) => percentile(x, 0.9)),
    p99: floorAvg((x) => percentile(x, 0.99)),
    sloAttainment: floorAvg((x) => x.filter((t) => t <= w.sloMs).length / x.length),
    mape: NaN,
    cacheHitRate: NaN,
    wallMs: 0,
  };
  for (const [name, factory] of strategies) {
    const runs = Array.from({ length: SEEDS }, (_, i) => {
      const scenario: Scenario = {
        name: w.name,
        speeds: SPEEDS,
        shape: SHAPE,
        phases: [{ ms: durationMs, load: LOAD }],
        mix: { longShare: 0 },
        sloMs: w.sloMs,
        seed: w.seed + 1000 * (SEED_FROM + i),
        workload: (seed, total) => w.generate(seed, durationMs, LOAD * total),
      };
      return runScenario(scenario, factory, capacity, oracle);
    });
    const r = meanResult(runs);
    results[w.name][name] = r;
    console.error(
      `${w.name.padEnd(22)} ${name.padEnd(28)} p50 ${r.p50.toFixed(0).padStart(6)} p90 ${r.p90.toFixed(0).padStart(6)} SLO ${(r.sloAttainment * 100).toFixed(1).padStart(5)}% hit ${(r.cacheHitRate * 100).toFixed(1).padStart(5)}%  (${r.wallMs.toFixed(0)} ms)`,
    );
  }
}

const pct = (x: number) => (Number.isNaN(x) ? '–' : `${(x * 100).toFixed(1)}%`);
const lines = [
  `Mean of ${SEEDS} seeds per cell${SEED_FROM ? ` (from seed index ${SEED_FROM})` : ''}; ${SHAPE.name}, ${SPEEDS.length} pods (speeds ${SPEEDS.join(', ')}), ${LOAD * 100}% of the prefix-blind capacity, 5 minutes; TTFT in ms.`,
  '',
  '| workload (SLO) | strategy | requests | TTFT p50 | p90 | p99 | SLO attainment | cache hit rate |',
  '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |',
];
for (const w of WORKLOADS) {
  for (const [strategy, r] of Object.entries(results[w.name] ?? {})) {
    lines.push(
      `| ${w.name} (${w.sloMs} ms) | ${strategy} | ${r.requests.toFixed(0)} | ${r.p50.toFixed(0)} | ${r.p90.toFixed(0)} | ${r.p99.toFixed(0)} | ${pct(r.sloAttainment)} | ${pct(r.cacheHitRate)} |`,
    );
  }
}
// The issue's yardsticks: Kinference's p90 against the GIE profile and its own prefix-blind self,
// and how much of GIE's p90 any router could remove at all (down to the floor).
lines.push(
  '',
  '| workload | p90 vs GIE | p90 vs prefix-blind | attainment vs prefix-blind (points) | floor vs GIE p90 |',
  '| --- | ---: | ---: | ---: | ---: |',
);
const change = (x?: number, base?: number) =>
  x === undefined || base === undefined ? '–' : `${x <= base ? '−' : '+'}${Math.abs((x / base - 1) * 100).toFixed(0)}%`;
for (const w of WORKLOADS) {
  const r = results[w.name];
  const k = r?.['kinference'];
  if (!k) continue;
  const gie = r['GIE queue+KV+prefix'];
  const blind = r['kinference, prefix-blind'];
  const points = blind ? (k.sloAttainment - blind.sloAttainment) * 100 : NaN;
  lines.push(
    `| ${w.name} | ${change(k.p90, gie?.p90)} | ${change(k.p90, blind?.p90)} | ${Number.isNaN(points) ? '–' : `${points >= 0 ? '+' : '−'}${Math.abs(points).toFixed(1)}`} | ${change(r[FLOOR].p90, gie?.p90)} |`,
  );
}
console.log(lines.join('\n'));
console.log(`\ntotal ${((performance.now() - started) / 1000).toFixed(1)} s`);
if (!only && !picked && !SEED_FROM) {
  mkdirSync('bench/results', { recursive: true });
  writeFileSync(
    `bench/results/routing-prefix-${LOAD}${process.env.SHAPE ? `-${SHAPE.name.replace(/[^a-z0-9]+/gi, '_')}` : ''}${process.env.SPEEDS ? `-speeds-${SPEEDS.join('_')}` : ''}.json`,
    JSON.stringify(
      { date: new Date().toISOString(), node: process.version, seeds: SEEDS, load: LOAD, shape: SHAPE.name, results },
      null,
      2,
    ),
  );
}
