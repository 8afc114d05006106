// The linear time-to-first-token model, learned online: one per node, shared by its pods and
// scaled by each pod's speed (node-model.ts).
//
// TTFT is, to first order, linear in what stands in front of the request:
//   ttft ≈ base + perRunning·running + perKPromptTokens·(promptTokens/1000)       its own prefill
//        + perQueued·queued + perKPendingTokens·(pendingPromptTokens/1000)         the wait ahead of it
// `running` slows prefill and interleaves decode steps, the prompt's (uncached) tokens set the
// prefill work; `queued` (requests ahead, including this agent's not yet scraped) is the wait for a
// batch slot and pending prompt tokens the prefill work ahead of it. A pod half as fast has every
// coefficient doubled, which is exactly what the per-pod speed factor learns. (We tried a hinge at
// the batch size — "slots to wait for" — and dropped it: the batch size is not in any engine's
// metrics, and estimating it from the peak running count put the hinge in the wrong place on pods
// that had not yet been full, doubling the error.)
//
// The two parts are learned apart. The own prefill learns only from requests that found nothing
// ahead (no queue, none of this agent's prefills pending), which carry no information about the
// wait anyway; the wait learns from the others, on what the own prefill leaves of them. Fitted
// jointly, a saturated pod — every request behind a queue, `running` stuck at the batch size —
// cannot tell the intercept from the load, and the waits for a slot went into `base` (1.4 s in
// bench:routing-prefix at 1.6× load; without bound when a pod was saturated from its first
// request). `base` + the prefill of a typical prompt is what the router's load term prices a held
// request at (route/score.ts unloadedTtft), so saturation made every held request look 15× dearer.
// Apart, saturation teaches the wait and leaves the idle cost where unloaded requests measured it.
//
// Fit: recursive least squares with exponential forgetting, weighted to minimise relative
// error. It is O(d²) multiply-adds per observation (d ≤ 3), needs no stored history, tracks drift
// (a pod slowing as its output mix changes) through the forgetting factor, and starts from a
// prior that is sensible before any data. A prediction is 5 multiply-adds.
import type { PredictorParams } from '../types.ts';

export interface Features {
  queued: number;
  running: number;
  promptTokens: number;
  /** Prompt tokens of this agent's requests at the pod that have no first token yet. */
  pendingPromptTokens?: number;
}

export interface PredictorOptions {
  /** Forgetting factor λ: the fit remembers ~1/(1-λ) recent observations. */
  forgetting: number;
  /** Prior parameters, before any observation. */
  prior: PredictorParams;
  /** Prior variance on each parameter: large = trust data quickly. */
  priorVariance: number;
  /** Floor for any prediction (ms): a network round trip and a scheduler step. */
  minTtftMs: number;
}

/** A prior shaped like an 8B model on one GPU (see the simulator's latency model in docs/benchmarks.md). */
export const DEFAULT_PREDICTOR: PredictorOptions = {
  forgetting: 0.98,
  prior: { base: 25, perQueued: 200, perRunning: 2, perKPromptTokens: 250, perKPendingTokens: 250 },
  priorVariance: 1e6,
  minTtftMs: 1,
};

export function predictWith(params: PredictorParams, f: Features, minTtftMs = DEFAULT_PREDICTOR.minTtftMs): number {
  return predictFrom(params, f.queued, f.running, f.promptTokens, f.pendingPromptTokens ?? 0, minTtftMs);
}

/** predictWith over the features as numbers: the router predicts every candidate of every
 *  request, and a features object per prediction is garbage the GC must clear. */
export function predictFrom(
  params: PredictorParams,
  queued: number,
  running: number,
  promptTokens: number,
  pendingPromptTokens: number,
  minTtftMs = DEFAULT_PREDICTOR.minTtftMs,
): number {
  const y =
    params.base +
    params.perQueued * queued +
    params.perRunning * running +
    (params.perKPromptTokens * promptTokens) / 1000 +
    ((params.perKPendingTokens ?? 0) * pendingPromptTokens) / 1000;
  return y > minTtftMs ? y : minTtftMs;
}

/** Nothing waits ahead of the request: its TTFT is its own prefill in the batch it joins. */
const nothingAhead = (f: Features): boolean => f.queued <= 0 && !(f.pendingPromptTokens ?? 0);

/**
 * Recursive least squares over a few non-negative coefficients, with forgetting and a bound on
 * each coefficient's variance. Every measured request is one observation, so the update works in
 * scratch space kept per fit (no arrays per call): the same operations in the same order as
 * written plainly, so the same numbers, without the garbage (14 KB per request was a third of
 * what the agent allocated per request, bench:proxy serial).
 */
class Rls {
  readonly theta: number[];
  /** Inverse-covariance-like matrix P of RLS, row-major d×d. */
  readonly #p: Float64Array;
  readonly #d: number;
  readonly priorVariance: number;
  readonly forgetting: number;
  /** P·x, then the variance bound's scale: scratch of `observe`. */
  readonly #px: Float64Array;
  readonly #scale: Float64Array;
  readonly #projection: Projection;

  constructor(initial: number[], priorVariance: number, forgetting: number) {
    this.priorVariance = priorVariance;
    this.forgetting = forgetting;
    this.theta = [...initial];
    this.#d = initial.length;
    this.#p = new Float64Array(this.#d * this.#d);
    for (let i = 0; i < this.#d; i++) this.#p[i * this.#d + i] = priorVariance;
    this.#px = new Float64Array(this.#d);
    this.#scale = new Float64Array(this.#d);
    this.#projection = new Projection(this.#d);
  }

  /** One observation: features `x` explain `target`, both already scaled by the observation's weight. */
  observe(x: readonly number[], target: number): void {
    const d = this.#d;
    const p = this.#p;
    const theta = this.theta;
    const lambda = this.forgetting;
    // k = P·x / (λ + xᵀ·P·x)
    const px = this.#px;
    for (let i = 0; i < d; i++) {
      let s = 0;
      for (let j = 0; j < d; j++) s += p[i * d + j] * x[j];
      px[i] = s;
    }
    let denominator = lambda;
    for (let i = 0; i < d; i++) denominator += x[i] * px[i];
    let fitted = 0;
    for (let i = 0; i < d; i++) fitted += theta[i] * x[i];
    const error = target - fitted;
    for (let i = 0; i < d; i++) theta[i] += (px[i] / denominator) * error;
    // P = (P - k·xᵀ·P) / λ ; P is symmetric so xᵀ·P = (P·x)ᵀ.
    for (let i = 0; i < d; i++) {
      for (let j = 0; j < d; j++) p[i * d + j] = (p[i * d + j] - (px[i] * px[j]) / denominator) / lambda;
    }
    // Bound each coefficient's variance so a feature that stays constant (an idle pod, a feature
    // this agent never sees move) cannot wind its gain up under forgetting. Scaling as D·P·D with
    // a diagonal D keeps P symmetric and positive definite, and leaves the other coefficients'
    // gains alone (a cap on the trace would let one idle feature starve the rest).
    const maxVariance = this.priorVariance * 100;
    const scale = this.#scale.fill(1);
    let wound = false;
    for (let i = 0; i < d; i++) {
      if (p[i * d + i] > maxVariance) {
        scale[i] = Math.sqrt(maxVariance / p[i * d + i]);
        wound = true;
      }
    }
    if (wound) for (let i = 0; i < d; i++) for (let j = 0; j < d; j++) p[i * d + j] *= scale[i] * scale[j];
    // Every cost is physical, so none is negative: without a bound a burst of noisy samples can
    // tilt a coefficient below zero and make a long queue look free.
    let negative = false;
    for (let i = 0; i < d; i++) if (theta[i] < 0) negative = true;
    if (negative) this.#projection.apply(theta, p);
  }
}

/**
 * Moves θ to the nearest point with every coefficient ≥ 0 in the fit's own metric (P⁻¹: the
 * constrained least-squares answer), not coordinate by coordinate. Coefficients whose features
 * move together are correlated in P, and clipping one alone kept the others' compensation for
 * it: when `running` stays near the batch size it is nearly a constant, so `base` and
 * `perRunning` trade off; a TTFT far below the prediction pushed `base` below zero and the others
 * up, and clipping `base` back to 0 left the others up, so each low measurement raised the next
 * prediction (perRunning 30 → 1,200 ms and perKPromptTokens 600 → 2,800 in 10 s as an overload
 * drained in bench:routing-prefix, multi-turn at 1.6×, seed 7,021). Projected in P's metric, a
 * coefficient held at 0 takes back what the others moved for it. d ≤ 3, so every set of
 * coefficients held at 0 is tried (at most 7 small solves) and the nearest feasible point kept;
 * holding all at 0 is always feasible. A fast pod's measurements sit below the prediction, so
 * this runs on most requests: it works in scratch space of its own, made once per fit.
 */
class Projection {
  readonly #d: number;
  readonly #raw: Float64Array;
  readonly #held: Int32Array;
  /** y of the solve, then the candidate point, then the best one found. */
  readonly #y: Float64Array;
  readonly #candidate: Float64Array;
  readonly #best: Float64Array;
  /** The augmented system [P[held, held] | θ[held]], row-major n×(n+1) with n ≤ d. */
  readonly #m: Float64Array;

  constructor(d: number) {
    this.#d = d;
    this.#raw = new Float64Array(d);
    this.#held = new Int32Array(d);
    this.#y = new Float64Array(d);
    this.#candidate = new Float64Array(d);
    this.#best = new Float64Array(d);
    this.#m = new Float64Array(d * (d + 1));
  }

  apply(theta: number[], p: Float64Array): void {
    const d = this.#d;
    const raw = this.#raw;
    const held = this.#held;
    const y = this.#y;
    const candidate = this.#candidate;
    for (let i = 0; i < d; i++) raw[i] = theta[i];
    let bestDistance = Infinity;
    let found = false;
    for (let mask = 1; mask < 1 << d; mask++) {
      let n = 0;
      for (let i = 0; i < d; i++) if (mask & (1 << i)) held[n++] = i;
      // y = P[held, held]⁻¹ · θ[held]; the projection is θ − P[:, held] · y, at distance θ[held]ᵀ · y.
      if (!this.#solve(p, n)) continue;
      let distance = 0;
      for (let k = 0; k < n; k++) distance += raw[held[k]] * y[k];
      if (distance >= bestDistance) continue;
      let feasible = true;
      for (let i = 0; i < d; i++) {
        let s = 0;
        if (!(mask & (1 << i))) {
          s = raw[i];
          for (let k = 0; k < n; k++) s -= p[i * d + held[k]] * y[k];
        }
        candidate[i] = s;
        if (!(s >= 0)) feasible = false;
      }
      if (feasible) {
        bestDistance = distance;
        this.#best.set(candidate);
        found = true;
      }
    }
    for (let i = 0; i < d; i++) theta[i] = found ? this.#best[i] : Math.max(0, raw[i]);
  }

  /** Solves P[held, held]·y = θ[held] into `y` (Gaussian elimination, partial pivoting); false if singular. */
  #solve(p: Float64Array, n: number): boolean {
    const d = this.#d;
    const held = this.#held;
    const m = this.#m;
    const y = this.#y;
    const w = n + 1;
    for (let r = 0; r < n; r++) {
      for (let c = 0; c < n; c++) m[r * w + c] = p[held[r] * d + held[c]];
      m[r * w + n] = this.#raw[held[r]];
    }
    for (let c = 0; c < n; c++) {
      let pivot = c;
      for (let r = c + 1; r < n; r++) if (Math.abs(m[r * w + c]) > Math.abs(m[pivot * w + c])) pivot = r;
      if (!(Math.abs(m[pivot * w + c]) > 0)) return false;
      if (pivot !== c) {
        for (let k = 0; k < w; k++) {
          const t = m[c * w + k];
          m[c * w + k] = m[pivot * w + k];
          m[pivot * w + k] = t;
        }
      }
      for (let r = c + 1; r < n; r++) {
        const f = m[r * w + c] / m[c * w + c];
        for (let k = c; k <= n; k++) m[r * w + k] -= f * m[c * w + k];
      }
    }
    for (let r = n - 1; r >= 0; r--) {
      let s = m[r * w + n];
      for (let k = r + 1; k < n; k++) s -= m[r * w + k] * y[k];
      y[r] = s / m[r * w + r];
    }
    return true;
  }
}

export class TtftPredictor {
  readonly options: PredictorOptions;
  /** base, perRunning, perKPromptTokens: the request's own prefill in the batch it joins. */
  readonly #own: Rls;
  /** perQueued, perKPendingTokens: the wait for what is ahead of it. */
  readonly #ahead: Rls;
  #observations = 0;
  /** Running mean absolute percentage error of predictions made just before each observation. */
  #apeSum = 0;
  /** `params` as last read: every candidate and prediction reads it, observations are rarer. */
  #params: PredictorParams | undefined;

  constructor(options: Partial<PredictorOptions> = {}) {
    this.options = { ...DEFAULT_PREDICTOR, ...options };
    const { base, perQueued, perRunning, perKPromptTokens, perKPendingTokens = 0 } = this.options.prior;
    const { priorVariance, forgetting } = this.options;
    this.#own = new Rls([base, perRunning, perKPromptTokens], priorVariance, forgetting);
    this.#ahead = new Rls([perQueued, perKPendingTokens], priorVariance, forgetting);
  }

  /** The current coefficients; one object until the next observation (it is never changed in place). */
  get params(): PredictorParams {
    if (this.#params) return this.#params;
    const own = this.#own.theta;
    const ahead = this.#ahead.theta;
    return (this.#params = {
      base: own[0],
      perQueued: ahead[0],
      perRunning: own[1],
      perKPromptTokens: own[2],
      perKPendingTokens: ahead[1],
    });
  }

  get observations(): number {
    return this.#observations;
  }

  /** Mean absolute percentage error of one-step-ahead predictions so far (NaN before data). */
  get mape(): number {
    return this.#observations === 0 ? NaN : this.#apeSum / this.#observations;
  }

  predict(f: Features): number {
    return predictWith(this.params, f, this.options.minTtftMs);
  }

  /** Learn from one measured TTFT (ms) for a request sent when the pod looked like `f`. */
  observe(f: Features, ttftMs: number): void {
    if (!Number.isFinite(ttftMs) || ttftMs < 0) return;
    const predicted = this.predict(f);
    if (ttftMs > 0) this.#apeSum += Math.abs(predicted - ttftMs) / ttftMs;
    this.#observations++;

    // Weighted least squares with weight 1/ttft²: the fit minimises *relative* error, which is
    // what routing compares (a 50 ms miss matters at 60 ms, not at 6 s). Unweighted, the rare
    // multi-second queue waits dominate the squares and light requests are over-predicted 2×.
    const scale = 1 / Math.max(ttftMs, 10 * this.options.minTtftMs);
    this.#params = undefined;
    if (nothingAhead(f)) {
      this.#own.observe([scale, f.running * scale, (f.promptTokens / 1000) * scale], ttftMs * scale);
    } else {
      // The wait is what the own prefill leaves of the measurement.
      const theta = this.#own.theta;
      const own = theta[0] + theta[1] * f.running + (theta[2] * f.promptTokens) / 1000;
      this.#ahead.observe([f.queued * scale, ((f.pendingPromptTokens ?? 0) / 1000) * scale], (ttftMs - own) * scale);
    }
  }
}
