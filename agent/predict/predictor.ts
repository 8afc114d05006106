// The linear time-to-first-token model, learned online: one per node, shared by its pods and
// scaled by each pod's speed (node-model.ts).
//
// TTFT is, to first order, linear in what stands in front of the request:
//   ttft ≈ base + perQueued·queued + perRunning·running + perKPromptTokens·(promptTokens/1000)
//          + perKPendingTokens·(pendingPromptTokens/1000)
// `queued` (requests ahead, including this agent's not yet scraped) is the wait for a batch
// slot, `running` slows prefill and interleaves decode steps, and prompt size sets prefill
// work. A pod half as fast has every coefficient doubled, which is exactly what the per-pod
// speed factor learns. (We tried a hinge at the batch size — "slots to wait for" — and dropped it: the batch
// size is not in any engine's metrics, and estimating it from the peak running count put the
// hinge in the wrong place on pods that had not yet been full, doubling the error.)
//
// Fit: recursive least squares with exponential forgetting, weighted to minimise relative
// error. It is O(d²) = 25 multiply-adds per observation (d = 5 features), needs no stored history, tracks drift
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

/** A prior shaped like an 8B model on one GPU (see the simulator's latency model in README). */
export const DEFAULT_PREDICTOR: PredictorOptions = {
  forgetting: 0.98,
  prior: { base: 25, perQueued: 200, perRunning: 2, perKPromptTokens: 250, perKPendingTokens: 250 },
  priorVariance: 1e6,
  minTtftMs: 1,
};

const DIM = 5;

function featureVector(f: Features): [number, number, number, number, number] {
  return [1, f.queued, f.running, f.promptTokens / 1000, (f.pendingPromptTokens ?? 0) / 1000];
}

export function predictWith(params: PredictorParams, f: Features, minTtftMs = DEFAULT_PREDICTOR.minTtftMs): number {
  const y =
    params.base +
    params.perQueued * f.queued +
    params.perRunning * f.running +
    (params.perKPromptTokens * f.promptTokens) / 1000 +
    ((params.perKPendingTokens ?? 0) * (f.pendingPromptTokens ?? 0)) / 1000;
  return y > minTtftMs ? y : minTtftMs;
}

export class TtftPredictor {
  readonly options: PredictorOptions;
  #theta: number[];
  /** Inverse-covariance-like matrix P of RLS, row-major DIM×DIM. */
  #p: Float64Array;
  #observations = 0;
  /** Running mean absolute percentage error of predictions made just before each observation. */
  #apeSum = 0;

  constructor(options: Partial<PredictorOptions> = {}) {
    this.options = { ...DEFAULT_PREDICTOR, ...options };
    const { base, perQueued, perRunning, perKPromptTokens, perKPendingTokens = 0 } = this.options.prior;
    this.#theta = [base, perQueued, perRunning, perKPromptTokens, perKPendingTokens];
    this.#p = new Float64Array(DIM * DIM);
    for (let i = 0; i < DIM; i++) this.#p[i * DIM + i] = this.options.priorVariance;
  }

  get params(): PredictorParams {
    const [base, perQueued, perRunning, perKPromptTokens, perKPendingTokens] = this.#theta;
    return { base, perQueued, perRunning, perKPromptTokens, perKPendingTokens };
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
    const x = featureVector(f).map((v) => v * scale);
    const target = ttftMs * scale;
    const lambda = this.options.forgetting;
    const p = this.#p;
    // k = P·x / (λ + xᵀ·P·x)
    const px = new Array<number>(DIM).fill(0);
    for (let i = 0; i < DIM; i++) {
      let s = 0;
      for (let j = 0; j < DIM; j++) s += p[i * DIM + j] * x[j];
      px[i] = s;
    }
    let denominator = lambda;
    for (let i = 0; i < DIM; i++) denominator += x[i] * px[i];
    let fitted = 0;
    for (let i = 0; i < DIM; i++) fitted += this.#theta[i] * x[i];
    const error = target - fitted;
    for (let i = 0; i < DIM; i++) this.#theta[i] += (px[i] / denominator) * error;
    // Every cost is physical, so none is negative: project back onto θ ≥ 0. Without this a
    // burst of noisy samples can tilt a coefficient below zero and make a long queue look free.
    for (let i = 0; i < DIM; i++) if (this.#theta[i] < 0) this.#theta[i] = 0;
    // P = (P - k·xᵀ·P) / λ ; P is symmetric so xᵀ·P = (P·x)ᵀ.
    for (let i = 0; i < DIM; i++) {
      for (let j = 0; j < DIM; j++) p[i * DIM + j] = (p[i * DIM + j] - (px[i] * px[j]) / denominator) / lambda;
    }
    // Bound each coefficient's variance so a feature that stays constant (an idle pod, a feature
    // this agent never sees move) cannot wind its gain up under forgetting. Scaling as D·P·D with
    // a diagonal D keeps P symmetric and positive definite, and leaves the other coefficients'
    // gains alone (a cap on the trace would let one idle feature starve the rest).
    const maxVariance = this.options.priorVariance * 100;
    const d = new Array<number>(DIM).fill(1);
    let wound = false;
    for (let i = 0; i < DIM; i++) {
      if (p[i * DIM + i] > maxVariance) {
        d[i] = Math.sqrt(maxVariance / p[i * DIM + i]);
        wound = true;
      }
    }
    if (wound) for (let i = 0; i < DIM; i++) for (let j = 0; j < DIM; j++) p[i * DIM + j] *= d[i] * d[j];
  }
}
