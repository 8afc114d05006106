// `npm run bench:peak`: admission under a peak with overflow, in virtual time. Four pods of each
// pool shape unless it says otherwise (shapes of its own besides bench:routing's), loads of 1×,
// 1.5×, 2× and 3× the pool's capacity, 30% of requests not allowed to leave, a provider answering
// in 150–400 ms.
//
// Per shape and load, one 120 s run from a fresh agent: its first 60 s are the cold start, its
// last 60 s the steady state; a second run restarts the agent at 60 s (it keeps only what peers
// gossiped back) and reports the 60 s after. The reference is not a cautious admitter: the oracle's
// perfect view of every pod with a fixed margin, swept offline from tight to loose, and the
// largest local share among the margins whose leavable requests met the target over the run.
// Writes bench/results/peak.json (peak-fresh.json with --fresh, peak-unseen.json with --unseen).
//   --seeds N      seeds per shape (default 1)      --shape TEXT   only shapes whose name contains TEXT
//   --fresh        the shapes added after the loop's constants were chosen, instead of the others
//   --unseen       a third set, chosen before the last round of tuning and kept out of it
//   --loop-attainment X  the loop's slo.attainment (default 0.99; the reference and the p99 rule
//                  stay at 0.99): what a stricter target trades. Writes peak[-SET]-loop<X%>.json.
import { mkdirSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { calibrateCapacity } from './routing/harness.ts';
import { runPeak, shares, type PeakStrategyFactory, type Shares } from './peak/harness.ts';
import { HALF_MS, MIX, peakScenario, SHAPE_SETS, SLO_MS } from './peak/shapes.ts';
import {
  ATTAINMENT,
  fitOracle,
  fixedMargin,
  peakStrategies,
  sweepReference,
  type Reference,
} from './peak/strategies.ts';

const { values } = parseArgs({
  options: {
    seeds: { type: 'string', default: '1' },
    shape: { type: 'string' },
    fresh: { type: 'boolean', default: false },
    unseen: { type: 'boolean', default: false },
    'loop-attainment': { type: 'string', default: String(ATTAINMENT) },
  },
});
const LOOP_ATTAINMENT = Number(values['loop-attainment']);
if (!(LOOP_ATTAINMENT > 0 && LOOP_ATTAINMENT < 1)) throw new Error('--loop-attainment: a share above 0 and below 1');
const PEAK_STRATEGIES = peakStrategies(LOOP_ATTAINMENT);
const SEEDS = Number(values.seeds);
const LOADS = [1, 1.5, 2, 3];

const SHAPE_SET = values.unseen ? 'unseen' : values.fresh ? 'fresh' : 'main';
const shapes = SHAPE_SETS[SHAPE_SET].filter((s) => !values.shape || s.name.includes(values.shape));

type Window = 'cold' | 'steady' | 'restart';
const WINDOWS: Window[] = ['steady', 'cold', 'restart'];
interface Row {
  shape: string;
  heldOut: boolean;
  load: number;
  seed: number;
  /**
   * Reference: the sweep's best local share at the target, the factor that gave it, and what its
   * must-stay requests got in the steady window (the same FCFS pods serve both: the free batch
   * slots a looser admission gives leavable requests are the ones must-stay requests wait for).
   */
  reference: Reference;
  /** strategy → window → shares. */
  runs: Record<string, Record<Window, Shares>>;
}
const rows: Row[] = [];
const started = performance.now();

for (const shape of shapes) {
  const capacity = calibrateCapacity(MIX, 99, shape);
  const oracle = fitOracle(shape, MIX, capacity);
  for (let i = 0; i < SEEDS; i++) {
    for (const load of LOADS) {
      const run = (factory: PeakStrategyFactory, restartAtMs?: number) =>
        runPeak(peakScenario(shape, load, i, restartAtMs), factory, capacity, oracle);
      const reference = sweepReference((factor) => run(fixedMargin(Math.log(factor))));
      const runs: Row['runs'] = {};
      for (const [name, factory] of PEAK_STRATEGIES) {
        const [cold, steady] = run(factory);
        const [, restart] = run(factory, HALF_MS);
        runs[name] = { cold: shares(cold), steady: shares(steady), restart: shares(restart) };
      }
      rows.push({ shape: shape.name, heldOut: shape.heldOut, load, seed: i, reference, runs });
    }
  }
  console.error(
    `${shape.name}${shape.heldOut ? ' (held out)' : ''}: ${capacity.toFixed(2)} req/s per pod (${((performance.now() - started) / 1000).toFixed(0)} s)`,
  );
}

const mean = (xs: number[]) => {
  const ok = xs.filter((x) => !Number.isNaN(x));
  return ok.length ? ok.reduce((a, b) => a + b, 0) / ok.length : NaN;
};
const pct = (x: number) => (Number.isNaN(x) ? '–' : `${(x * 100).toFixed(1)}%`);
const ratio = (r: Row, st: string, w: Window) =>
  r.reference.local > 0 ? r.runs[st][w].local / r.reference.local : NaN;
const strategies = PEAK_STRATEGIES.map(([n]) => n);

function summary(title: string, subset: Row[]): string[] {
  const lines = [
    title,
    '',
    '| load | strategy | leavable within SLO (steady / cold / restart) | non-leavable within SLO (steady) | local share (steady) | vs reference: steady / cold 60 s / restart | 429s |',
    '| ---: | --- | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const load of LOADS) {
    const at = subset.filter((r) => r.load === load);
    lines.push(
      `| ${load}× | reference | ${pct(mean(at.map((r) => r.reference.leavable)))} | ${pct(mean(at.map((r) => r.reference.staying)))} | ${pct(mean(at.map((r) => r.reference.local)))} | 1.00 | |`,
    );
    for (const st of strategies) {
      const m = (w: Window, f: (s: Shares) => number) => mean(at.map((r) => f(r.runs[st][w])));
      const ratios = WINDOWS.map((w) => mean(at.map((r) => ratio(r, st, w))).toFixed(2)).join(' / ');
      lines.push(
        `| ${load}× | ${st} | ${WINDOWS.map((w) => pct(m(w, (s) => s.leavable))).join(' / ')} | ${pct(m('steady', (s) => s.staying))} | ${pct(m('steady', (s) => s.local))} | ${ratios} | ${pct(m('steady', (s) => s.rejected))} |`,
      );
    }
  }
  return lines;
}

const heldOut = rows.filter((r) => r.heldOut);
const perShape = shapes.map((s) => {
  const mine = rows.filter((r) => r.shape === s.name);
  const cell = (load: number, w: Window) => {
    const at = mine.filter((r) => r.load === load);
    return `${mean(at.map((r) => ratio(r, 'controlled', w))).toFixed(2)} (${pct(mean(at.map((r) => r.runs.controlled[w].leavable)))})`;
  };
  const factors = LOADS.map((l) => mine.find((r) => r.load === l)?.reference.factor ?? NaN).join('/');
  const at15 = mine.filter((r) => r.load === 1.5);
  const staying = [
    ...strategies.map((st) => mean(at15.map((r) => r.runs[st].steady.staying))),
    mean(at15.map((r) => r.reference.staying)),
  ];
  return `| ${s.name}${s.heldOut ? ' (held out)' : ''} | ${[1.5, 2].map((l) => cell(l, 'steady')).join(' | ')} | ${[1.5, 2].map((l) => cell(l, 'cold')).join(' | ')} | ${[1.5, 2].map((l) => cell(l, 'restart')).join(' | ')} | ×${factors} | ${staying.map(pct).join(' / ')} |`;
});
/** Must-stay requests at 1.5×, the loop against the p99 rule on the same arrivals: mean and standard error of the difference. */
function pairedStaying(): string {
  const diffs = rows
    .filter((r) => r.load === 1.5)
    .map((r) => r.runs.controlled.steady.staying - r.runs.calibrated.steady.staying)
    .filter((d) => !Number.isNaN(d));
  const m = mean(diffs);
  const sd = Math.sqrt(diffs.reduce((a, d) => a + (d - m) ** 2, 0) / Math.max(1, diffs.length - 1));
  const points = (x: number) => `${x >= 0 ? '+' : '−'}${Math.abs(x * 100).toFixed(1)}`;
  return `Must-stay within SLO at 1.5×, controlled − calibrated, paired over ${diffs.length} runs (shape × seed): ${points(m)} ± ${Math.abs((sd / Math.sqrt(diffs.length)) * 100).toFixed(1)} points (mean ± standard error)`;
}

const out = [
  ...summary(
    `All ${shapes.length} pool shapes, ${SEEDS} seed(s) each, SLO ${SLO_MS} ms, target ${ATTAINMENT * 100}%${LOOP_ATTAINMENT === ATTAINMENT ? '' : ` (the loop's ${LOOP_ATTAINMENT * 100}%)`}:`,
    rows,
  ),
  '',
  ...(heldOut.length ? summary('Held-out shapes only:', heldOut) : []),
  '',
  'Per shape, controlled admission: local share vs reference (leavable within SLO)',
  '',
  `| shape | steady 1.5× | steady 2× | cold 1.5× | cold 2× | restart 1.5× | restart 2× | reference margin at 1/1.5/2/3× | must-stay within SLO at 1.5×: ${[...strategies, 'reference'].join(' / ')} |`,
  '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ...perShape,
  '',
  pairedStaying(),
];
console.log(out.join('\n'));
console.log(`\ntotal ${((performance.now() - started) / 1000).toFixed(1)} s`);
if (!values.shape) {
  mkdirSync('bench/results', { recursive: true });
  writeFileSync(
    `bench/results/peak${SHAPE_SET === 'main' ? '' : `-${SHAPE_SET}`}${LOOP_ATTAINMENT === ATTAINMENT ? '' : `-loop${LOOP_ATTAINMENT * 100}`}.json`,
    JSON.stringify(
      { date: new Date().toISOString(), node: process.version, seeds: SEEDS, sloMs: SLO_MS, shapes, rows },
      null,
      2,
    ),
  );
}
