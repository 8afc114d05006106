// `npm run bench:routing`: every strategy against the same simulated pools and the same recorded
// arrivals, in virtual time. Writes bench/results/routing.json and prints the table of docs/benchmarks.md.
import { mkdirSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import {
  calibrateCapacity,
  DEFAULT_SHAPE,
  fitOracleModel,
  meanResult,
  POOL_SHAPES,
  runScenario,
  type PodShape,
  type RunResult,
  type Scenario,
} from './routing/harness.ts';
import { BENCH_STRATEGIES } from './routing/strategies.ts';

const SHORT = { longShare: 0 };
const MINUTE = 60_000;
const args = parseArgs({ allowPositionals: true, options: { shapes: { type: 'boolean' }, seeds: { type: 'string' } } });
/** Every figure is the mean over these seeds (arrivals, jitter, picks): one seed is noise. */
const SEEDS = Number(args.values.seeds ?? (args.values.shapes ? 2 : 5));
/** `--shapes`: every scenario on every pool shape (bench/routing/harness.ts), not only the default one. */
const SHAPES: PodShape[] = args.values.shapes ? POOL_SHAPES.filter((s) => !s.speeds) : [DEFAULT_SHAPE];

/** A scenario on four equal pods at 80% load for two minutes, short prompts, a 500 ms SLO, but for what it names. */
const scenario = (s: Pick<Scenario, 'name' | 'seed'> & Partial<Scenario>): Scenario => ({
  speeds: [1, 1, 1, 1],
  phases: [{ ms: 2 * MINUTE, load: 0.8 }],
  mix: SHORT,
  sloMs: 500,
  ...s,
});

const SCENARIOS: Scenario[] = [
  scenario({ name: 'homogeneous', seed: 11 }),
  scenario({ name: 'heterogeneous', speeds: [1, 1, 0.5, 0.25], seed: 12 }),
  scenario({
    name: 'outside traffic',
    phases: [{ ms: 2 * MINUTE, load: 0.55 }],
    direct: { pod: 0, load: 0.9 },
    seed: 13,
  }),
  scenario({
    name: 'burst 2x',
    phases: [
      { ms: 20_000, load: 0.6 },
      { ms: 10_000, load: 2 },
      { ms: 30_000, load: 0.6 },
    ],
    seed: 14,
  }),
  scenario({ name: 'long prompts', mix: { longShare: 0.2 }, sloMs: 2000, seed: 15 }),
];

const only = args.positionals[0];
const results: Record<string, Record<string, RunResult>> = {};
const perSeed: Record<string, Record<string, RunResult[]>> = {};

const capacityByMix = new Map<string, { capacity: number; oracle: ReturnType<typeof fitOracleModel> }>();
const started = performance.now();

for (const shape of SHAPES)
  for (const base of SCENARIOS) {
    if (only && !base.name.includes(only)) continue;
    const scenario: Scenario = {
      ...base,
      shape,
      name: shape === DEFAULT_SHAPE ? base.name : `${shape.name}${shape.heldOut ? ' (held out)' : ''}: ${base.name}`,
    };
    const key = `${shape.name}/${scenario.mix.longShare}`;
    let calibration = capacityByMix.get(key);
    if (!calibration) {
      const capacity = calibrateCapacity(scenario.mix, 99, shape);
      calibration = { capacity, oracle: fitOracleModel(scenario.mix, capacity, 7, shape) };
      capacityByMix.set(key, calibration);
      console.error(
        `calibrated ${shape.name}, mix long=${scenario.mix.longShare}: ${capacity.toFixed(2)} req/s per speed-1 pod`,
      );
    }
    results[scenario.name] = {};
    perSeed[scenario.name] = {};
    for (const [name, factory] of BENCH_STRATEGIES) {
      const runs = Array.from({ length: SEEDS }, (_, i) =>
        runScenario({ ...scenario, seed: scenario.seed + 1000 * i }, factory, calibration.capacity, calibration.oracle),
      );
      const r = meanResult(runs);
      results[scenario.name][name] = r;
      perSeed[scenario.name][name] = runs;
      console.error(
        `${scenario.name.padEnd(16)} ${name.padEnd(14)} p50 ${r.p50.toFixed(0).padStart(6)} p90 ${r.p90.toFixed(0).padStart(6)} p99 ${r.p99.toFixed(0).padStart(6)} SLO ${(r.sloAttainment * 100).toFixed(1).padStart(5)}%  (${r.wallMs.toFixed(0)} ms)`,
      );
    }
  }

const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
const ms = (x: number) => x.toFixed(0);
const lines = [
  `Mean of ${SEEDS} seeds per cell; TTFT in ms.`,
  '',
  '| scenario | strategy | TTFT p50 | p90 | p99 | SLO attainment | prediction MAPE |',
  '| --- | --- | ---: | ---: | ---: | ---: | ---: |',
];
for (const [scenario, byStrategy] of Object.entries(results)) {
  const slo = SCENARIOS.find((s) => scenario.endsWith(s.name))!.sloMs;
  for (const [strategy, r] of Object.entries(byStrategy)) {
    lines.push(
      `| ${scenario} (SLO ${slo} ms) | ${strategy} | ${ms(r.p50)} | ${ms(r.p90)} | ${ms(r.p99)} | ${pct(r.sloAttainment)} | ${Number.isNaN(r.mape) ? '–' : pct(r.mape)} |`,
    );
  }
}
console.log(lines.join('\n'));

// The goals of the routing issue, checked on this run's figures (a benchmark reports; it doesn't fail).
const goals: string[] = [];
for (const [scenario, r] of Object.entries(results)) {
  const k = r['kinference'];
  goals.push(
    `${scenario}: SLO kinference ${pct(k.sloAttainment)} vs least-request ${pct(r['least-request'].sloAttainment)} vs oracle ${pct(r['oracle'].sloAttainment)}; p90 vs queue+KV ${((1 - k.p90 / r['queue+KV'].p90) * 100).toFixed(0)}% lower`,
  );
}
console.log(`\n${goals.join('\n')}\n\ntotal ${((performance.now() - started) / 1000).toFixed(1)} s`);

if (!only && !args.values.shapes) {
  mkdirSync('bench/results', { recursive: true });
  writeFileSync(
    'bench/results/routing.json',
    JSON.stringify(
      { date: new Date().toISOString(), node: process.version, seeds: SEEDS, scenarios: SCENARIOS, results, perSeed },
      null,
      2,
    ),
  );
}
