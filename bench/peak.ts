// `npm run bench:peak`: admission under a peak with overflow, in virtual time. Four pods of each
// pool shape, phases at 1x, 1.5x, 2x and 3x the pool's capacity, 30% of requests not allowed to
// leave, a provider answering in 150–400 ms. Prints per load: SLO attainment of leavable and
// non-leavable requests, local share and its ratio to the oracle's, 429s, and calibration (share
// of pod-served requests within the quantile they were admitted on). Writes bench/results/peak.json.
//   --seeds N      seeds per shape (default 2)      --phase S   seconds per load phase (default 20)
//   --shape TEXT   only shapes whose name contains TEXT
import { mkdirSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { calibrateCapacity, POOL_SHAPES } from './routing/harness.ts';
import { runPeak, type PeakScenario, type PhaseResult } from './peak/harness.ts';
import { ATTAINMENT, fitOracle, PEAK_STRATEGIES } from './peak/strategies.ts';

const { values } = parseArgs({
  options: {
    seeds: { type: 'string', default: '2' },
    phase: { type: 'string', default: '20' },
    shape: { type: 'string' },
  },
});
const SEEDS = Number(values.seeds);
const PHASE_MS = Number(values.phase) * 1000;
const LOADS = [1, 1.5, 2, 3];
const MIX = { longShare: 0 };
const SLO_MS = 800;

const shapes = POOL_SHAPES.filter((s) => !values.shape || s.name.includes(values.shape));
/** Shares are averaged per (shape, seed) run, so a big fast pool does not outweigh a small one. */
interface Shares {
  leavable: number;
  staying: number;
  local: number;
  rejected: number;
  calibration: number;
}
const shares = (r: PhaseResult): Shares => {
  const n = r.leavable + r.staying;
  return {
    leavable: r.leavableWithin / r.leavable,
    staying: r.stayingWithin / r.staying,
    local: r.local / n,
    rejected: r.rejected / n,
    calibration: r.calibrated ? r.calibratedWithin / r.calibrated : NaN,
  };
};
const results: Record<string, Record<string, Shares[][]>> = {}; // shape → strategy → load → runs
const started = performance.now();

for (const shape of shapes) {
  const capacity = calibrateCapacity(MIX, 99, shape);
  const oracle = fitOracle(shape, MIX, capacity);
  results[shape.name] = {};
  for (const [name, factory] of PEAK_STRATEGIES) {
    const perLoad: Shares[][] = LOADS.map(() => []);
    for (let i = 0; i < SEEDS; i++) {
      const scenario: PeakScenario = {
        shape,
        speeds: shape.speeds ?? [1, 1, 1, 1],
        phases: LOADS.map((load) => ({ ms: PHASE_MS, load })),
        mix: MIX,
        sloMs: SLO_MS,
        stayShare: 0.3,
        waitMs: 2000,
        seed: 31 + 1000 * i,
      };
      const phases = runPeak(scenario, factory, capacity, oracle);
      phases.forEach((p, j) => perLoad[j].push(shares(p)));
    }
    results[shape.name][name] = perLoad;
  }
  console.error(
    `${shape.name}${shape.heldOut ? ' (held out)' : ''}: ${capacity.toFixed(2)} req/s per pod, oracle margin ×${Math.exp(oracle.logMargin).toFixed(2)} (${((performance.now() - started) / 1000).toFixed(0)} s)`,
  );
}

const mean = (xs: number[]) => {
  const ok = xs.filter((x) => !Number.isNaN(x));
  return ok.length ? ok.reduce((a, b) => a + b, 0) / ok.length : NaN;
};
const pct = (x: number) => (Number.isNaN(x) ? '–' : `${(x * 100).toFixed(1)}%`);
const strategies = PEAK_STRATEGIES.map(([n]) => n);
const over = (shapeNames: string[], strategy: string, load: number, f: (s: Shares) => number) =>
  mean(shapeNames.flatMap((s) => results[s][strategy][load].map(f)));

function table(title: string, shapeNames: string[]): string[] {
  const lines = [
    `${title}`,
    '',
    '| load | strategy | leavable within SLO | non-leavable within SLO | local share | vs oracle | 429s | within admitted p99 |',
    '| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  LOADS.forEach((load, j) => {
    const oracleLocal = over(shapeNames, 'oracle', j, (s) => s.local);
    for (const st of strategies) {
      const local = over(shapeNames, st, j, (s) => s.local);
      lines.push(
        `| ${load}× | ${st} | ${pct(over(shapeNames, st, j, (s) => s.leavable))} | ${pct(over(shapeNames, st, j, (s) => s.staying))} | ${pct(local)} | ${(local / oracleLocal).toFixed(2)} | ${pct(over(shapeNames, st, j, (s) => s.rejected))} | ${st === 'queue > 2 overflow' ? '–' : pct(over(shapeNames, st, j, (s) => s.calibration))} |`,
      );
    }
  });
  return lines;
}

const names = shapes.map((s) => s.name);
const heldOut = shapes.filter((s) => s.heldOut).map((s) => s.name);
const out = [
  ...table(
    `All ${names.length} pool shapes, ${SEEDS} seeds each, ${PHASE_MS / 1000} s per load, SLO ${SLO_MS} ms, attainment ${ATTAINMENT * 100}%:`,
    names,
  ),
  '',
  ...(heldOut.length ? table(`Held-out shapes only (${heldOut.join('; ')}):`, heldOut) : []),
  '',
  'Per shape, calibrated admission: leavable within SLO at 1× / 1.5× / 2× / 3×; local share vs oracle at 1.5× / 2×',
  '',
  ...shapes.map((s) => {
    const r = (st: string, j: number, f: (x: Shares) => number) => over([s.name], st, j, f);
    // An oracle that kept nothing local (its offline fit failed the shape) gives no ratio.
    const ratio = (j: number) =>
      r('oracle', j, (x) => x.local) > 0
        ? (r('calibrated', j, (x) => x.local) / r('oracle', j, (x) => x.local)).toFixed(2)
        : '–';
    return `- ${s.name}${s.heldOut ? ' (held out)' : ''}: ${LOADS.map((_, j) => pct(r('calibrated', j, (x) => x.leavable))).join(' / ')}; ${[1, 2].map(ratio).join(' / ')} (mean admission: ${LOADS.map((_, j) => pct(r('mean admission', j, (x) => x.leavable))).join(' / ')})`;
  }),
];
console.log(out.join('\n'));
console.log(`\ntotal ${((performance.now() - started) / 1000).toFixed(1)} s`);
if (!values.shape) {
  mkdirSync('bench/results', { recursive: true });
  writeFileSync(
    'bench/results/peak.json',
    JSON.stringify(
      {
        date: new Date().toISOString(),
        node: process.version,
        seeds: SEEDS,
        phaseMs: PHASE_MS,
        sloMs: SLO_MS,
        shapes,
        results,
      },
      null,
      2,
    ),
  );
}
