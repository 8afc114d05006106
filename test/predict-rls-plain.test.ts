// The predictor's update works in scratch space to spare the GC a few KB per request; this holds
// it to the plain formulation it replaced (arrays per step, the projection's seven small solves
// written as maps), number for number, over fits that are projected on most steps.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_PREDICTOR, TtftPredictor, type Features } from '../agent/predict/predictor.ts';
import { mulberry32 } from '../shared/sim/random.ts';

function solve(a: number[][], b: number[]): number[] | undefined {
  const n = b.length;
  const m = a.map((row, i) => [...row, b[i]]);
  for (let c = 0; c < n; c++) {
    let pivot = c;
    for (let r = c + 1; r < n; r++) if (Math.abs(m[r][c]) > Math.abs(m[pivot][c])) pivot = r;
    if (!(Math.abs(m[pivot][c]) > 0)) return undefined;
    [m[c], m[pivot]] = [m[pivot], m[c]];
    for (let r = c + 1; r < n; r++) {
      const f = m[r][c] / m[c][c];
      for (let k = c; k <= n; k++) m[r][k] -= f * m[c][k];
    }
  }
  const y = new Array<number>(n).fill(0);
  for (let r = n - 1; r >= 0; r--) {
    let s = m[r][n];
    for (let k = r + 1; k < n; k++) s -= m[r][k] * y[k];
    y[r] = s / m[r][r];
  }
  return y;
}

function projectNonNegative(theta: number[], p: number[]): void {
  const d = theta.length;
  const raw = [...theta];
  let bestDistance = Infinity;
  let best: number[] | undefined;
  for (let mask = 1; mask < 1 << d; mask++) {
    const held: number[] = [];
    for (let i = 0; i < d; i++) if (mask & (1 << i)) held.push(i);
    const y = solve(
      held.map((i) => held.map((j) => p[i * d + j])),
      held.map((i) => raw[i]),
    );
    if (!y) continue;
    let distance = 0;
    for (let k = 0; k < held.length; k++) distance += raw[held[k]] * y[k];
    if (distance >= bestDistance) continue;
    const candidate = raw.map((t, i) => {
      if (mask & (1 << i)) return 0;
      let s = t;
      for (let k = 0; k < held.length; k++) s -= p[i * d + held[k]] * y[k];
      return s;
    });
    if (candidate.every((t) => t >= 0)) {
      bestDistance = distance;
      best = candidate;
    }
  }
  for (let i = 0; i < d; i++) theta[i] = best ? best[i] : Math.max(0, raw[i]);
}

class PlainRls {
  readonly theta: number[];
  readonly p: number[];
  readonly priorVariance: number;
  readonly forgetting: number;
  constructor(initial: number[], priorVariance: number, forgetting: number) {
    this.priorVariance = priorVariance;
    this.forgetting = forgetting;
    const d = initial.length;
    this.theta = [...initial];
    this.p = new Array<number>(d * d).fill(0);
    for (let i = 0; i < d; i++) this.p[i * d + i] = priorVariance;
  }
  observe(x: number[], target: number): void {
    const { theta, p, forgetting: lambda } = this;
    const d = theta.length;
    const px = x.map((_, i) => x.reduce((s, xj, j) => s + p[i * d + j] * xj, 0));
    const denominator = x.reduce((s, xi, i) => s + xi * px[i], lambda);
    const error = target - x.reduce((s, xi, i) => s + theta[i] * xi, 0);
    for (let i = 0; i < d; i++) theta[i] += (px[i] / denominator) * error;
    for (let i = 0; i < d; i++)
      for (let j = 0; j < d; j++) p[i * d + j] = (p[i * d + j] - (px[i] * px[j]) / denominator) / lambda;
    const maxVariance = this.priorVariance * 100;
    const scale = p.filter((_, k) => k % (d + 1) === 0).map((v) => (v > maxVariance ? Math.sqrt(maxVariance / v) : 1));
    if (scale.some((s) => s !== 1))
      for (let i = 0; i < d; i++) for (let j = 0; j < d; j++) p[i * d + j] *= scale[i] * scale[j];
    if (theta.some((t) => t < 0)) projectNonNegative(theta, p);
  }
}

/** TtftPredictor.observe's split into the own prefill and the wait, over the plain fits. */
function plainPredictor(forgetting: number) {
  const { prior, priorVariance, minTtftMs } = DEFAULT_PREDICTOR;
  const own = new PlainRls([prior.base, prior.perRunning, prior.perKPromptTokens], priorVariance, forgetting);
  const ahead = new PlainRls([prior.perQueued, prior.perKPendingTokens ?? 0], priorVariance, forgetting);
  return {
    own,
    ahead,
    observe(f: Features, ttftMs: number) {
      const scale = 1 / Math.max(ttftMs, 10 * minTtftMs);
      if (f.queued <= 0 && !(f.pendingPromptTokens ?? 0)) {
        own.observe([scale, f.running * scale, (f.promptTokens / 1000) * scale], ttftMs * scale);
      } else {
        const [base, perRunning, perKPromptTokens] = own.theta;
        const o = base + perRunning * f.running + (perKPromptTokens * f.promptTokens) / 1000;
        ahead.observe([f.queued * scale, ((f.pendingPromptTokens ?? 0) / 1000) * scale], (ttftMs - o) * scale);
      }
    },
  };
}

test('the predictor learns exactly what the plain least-squares update does, projections included', () => {
  const rand = mulberry32(2026);
  let projected = 0;
  for (let run = 0; run < 40; run++) {
    const forgetting = 0.9 + rand() * 0.099;
    const lean = new TtftPredictor({ forgetting });
    const plain = plainPredictor(forgetting);
    for (let i = 0; i < 400; i++) {
      const f: Features = {
        queued: rand() < 0.5 ? 0 : Math.floor(rand() * 20),
        running: Math.floor(rand() * 64),
        promptTokens: Math.floor(rand() * 4000),
        pendingPromptTokens: rand() < 0.5 ? 0 : Math.floor(rand() * 8000),
      };
      // Mostly far below or far above the prediction: the fit is pushed against its bounds.
      const ms = rand() < 0.1 ? 0.3 : rand() < 0.5 ? rand() * 5 : rand() * 5000;
      lean.observe(f, ms);
      plain.observe(f, ms);
      const [base, perRunning, perKPromptTokens] = plain.own.theta;
      const [perQueued, perKPendingTokens] = plain.ahead.theta;
      assert.deepStrictEqual(lean.params, { base, perQueued, perRunning, perKPromptTokens, perKPendingTokens });
      if ([...plain.own.theta, ...plain.ahead.theta].includes(0)) projected++;
    }
  }
  assert.ok(projected > 4000, `the projection ran on ${projected} of 16,000 steps`);
});
