// How far to trust a prediction: the empirical distribution of log(measured / predicted) TTFT,
// per pod and for the whole node model, over a recent window. The router admits a pod for a
// request that may leave only when predicted · exp(margin(q)) — the q-quantile of its TTFT — is
// within the SLO; the mean prediction still ranks.
//
// Why log ratios: prediction error is multiplicative (a pod twice as loaded is off by twice the
// milliseconds), so one distribution of ratios serves an idle pod and a queued one. Why an
// empirical quantile over a window and not a fitted normal: the error is skewed (a request that
// lands behind a long prefill is late by a lot, never early by as much) and its shape changes
// with load; the window follows that change without a model of it.
//
// Three regimes, each with its own distributions: a request that finds requests queued ahead of
// it at the pod, one that finds none queued but the pod's batch full (as many running as the pod
// was last seen queueing at: it waits for a slot all the same), and one that finds a free slot.
// The error of the first two is several times wider (the wait for a slot depends on when running
// requests finish, which no scrape shows), and they decide admission near the SLO; mixed with
// calm requests' errors their quantile would be understated exactly at the peak, and the calm
// requests' overstated (on a pod of 4 slots, requests sent to a full batch with no queue met a
// median 2.7× their prediction and widened every free slot's margin to ×4.6, which overflowed
// most requests that had a free slot to go to).
//
// Widening, so that little evidence means "uncertain", never "fast":
//   - a pod with fewer observations than the quantile needs (about 2/(1-q): 200 for 99%) takes
//     at least its node's margin, fading out linearly as evidence comes: replicas on one node are
//     alike, so once the node's own window answers for q a new pod starts there, not cold;
//   - while the node's window is thin too (a fresh agent), a cold margin (×3 at 99%) is the
//     floor; it is a tail prior, scaled by log(1/(1-q)) so a looser admission quantile (the
//     attainment loop's, agent/admission/threshold.ts) loosens it too;
//   - a shift in load shows first in the most recent errors: when their mean sits above the
//     window's, the difference is added (the window alone would answer for the old load).
//
// The window is the last 256 observations, and no older than a minute once it holds more than 64:
// a pool serving a few requests a second took minutes to fill 256, so its window kept the errors
// of its first seconds (a model not yet learned, a cold start's queues) long after the model had
// learned, and its margin stayed wide for most of a peak (vllm 32 seqs at 4× costs: ×2 at 60 s,
// ×1.3 at 120 s, no miss in between).
//
// A prior (calibration-prior.ts): a pod's calibration as its agent gossiped it (this agent's
// previous incarnation, for its own pods after a restart; another node's agent, for that node's
// pods) stands for at most `priorObservations` pseudo-observations, one fewer for each of this
// agent's own, and still widened by the node's margin (or the cold one) while the evidence so
// counted is thin: a prior, not a verdict, and gone once the agent's own window answers.

import {
  blendWithPrior,
  flooredByEvidence,
  priorWeight,
  REGIMES,
  sanitizeSummary,
  SUMMARY_QUANTILES,
  tailPosition,
  type CalibrationSummary,
  type Regime,
  type RegimeSummary,
} from './calibration-prior.ts';

interface Residuals {
  values: Float64Array;
  /** When each value was observed (NaN: not said; such a value leaves by count only). */
  at: Float64Array;
  /** Observations ever (how much evidence there is), and how many the window holds now. */
  count: number;
  size: number;
  next: number;
  /** The window's values in ascending order (its first `size` entries), kept so as
   *  each observation comes: the next decision's quantile is a read, not a sort of the window. */
  sorted: Float64Array;
  /** The quantile `ownMargin` was computed for (NaN: none since the last observation). */
  ownQ: number;
  /** The window's `ownQ`-quantile raised by its recent shift: it only changes with an observation,
   *  and every candidate of every decision asks for it (the shift alone reads the whole window). */
  ownMargin: number;
}

export interface CalibrationOptions {
  /** Recent observations kept per pod (and for the node). */
  window: number;
  /** Older observations leave the window (at the next observation) while it holds more than `minKept`. */
  maxAgeMs: number;
  minKept: number;
  /** Observations whose mean is compared with the window's to detect a shift. */
  recent: number;
  /** Log margin at q = 99% of a node about which nothing is known yet (log 3: three times the mean). */
  coldLogMargin: number;
  /** Fewest observations before a pod's own quantile is trusted fully, whatever q. */
  minWarmObservations: number;
  /** The most pseudo-observations a gossiped summary stands for (the 99% quantile's need: 2/(1-q)). */
  priorObservations: number;
}

export const DEFAULT_CALIBRATION: CalibrationOptions = {
  window: 256,
  maxAgeMs: 60_000,
  minKept: 64,
  recent: 16,
  coldLogMargin: Math.log(3),
  minWarmObservations: 32,
  priorObservations: 200,
};

export type { Regime } from './calibration-prior.ts';

/** The quantile the cold margin is stated for. */
const COLD_AT = 0.99;

/** Key for the node-wide distribution (every local pod's observations). */
const NODE = '\u0000node';

function quantileOf(r: Residuals, q: number): number {
  const n = r.size;
  // The rank that estimates the q-quantile without bias toward the middle: ceil(q·(n+1)).
  const rank = Math.min(n, Math.max(1, Math.ceil(q * (n + 1))));
  return r.sorted[rank - 1];
}

/** The first index in sorted[0, n) whose value is not below `value` (n: none). */
function lowerBound(sorted: Float64Array, n: number, value: number): number {
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (sorted[mid] < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The window's oldest value leaves it, and its sorted copy. */
function dropOldest(r: Residuals): void {
  const cap = r.values.length;
  const leaving = r.values[(r.next - r.size + cap) % cap];
  const at = lowerBound(r.sorted, r.size, leaving); // present: it is the window's own value
  r.sorted.copyWithin(at, at + 1, r.size);
  r.size--;
}

/** `value`, observed at `at`, joins the window (which has room) and its sorted copy. */
function append(r: Residuals, value: number, at: number): void {
  const i = lowerBound(r.sorted, r.size, value);
  r.sorted.copyWithin(i + 1, i, r.size);
  r.sorted[i] = value;
  r.values[r.next] = value;
  r.at[r.next] = at;
  r.next = (r.next + 1) % r.values.length;
  r.size++;
  r.count++;
}

function meanOf(r: Residuals, last: number): number {
  const cap = r.values.length;
  const n = Math.min(r.size, last);
  let sum = 0;
  for (let i = 1; i <= n; i++) sum += r.values[(r.next - i + cap) % cap];
  return sum / n;
}

export class Calibration {
  readonly options: CalibrationOptions;
  /** By regime, then pod uid (or NODE): no key is built per lookup, and margin() runs for every
   *  candidate of every decision. */
  readonly #residuals: Readonly<Record<Regime, Map<string, Residuals>>> = {
    free: new Map(),
    full: new Map(),
    queued: new Map(),
  };
  /** The node's margin per regime and the quantile it is for (NaN: none since an observation). */
  readonly #nodeMargins: Readonly<Record<Regime, { q: number; margin: number }>> = {
    free: { q: NaN, margin: 0 },
    full: { q: NaN, margin: 0 },
    queued: { q: NaN, margin: 0 },
  };

  /** Gossiped summaries by pod uid (sanitized): priors for pods this agent has little evidence of. */
  readonly #priors = new Map<string, CalibrationSummary>();

  constructor(options: Partial<CalibrationOptions> = {}) {
    this.options = { ...DEFAULT_CALIBRATION, ...options };
  }

  /** One measured TTFT against the prediction the request was admitted on, measured at `at` (ms). */
  observe(uid: string, predictedMs: number, measuredMs: number, regime: Regime = 'free', at = NaN): void {
    if (!(predictedMs > 0) || !(measuredMs > 0) || !Number.isFinite(predictedMs) || !Number.isFinite(measuredMs))
      return;
    const logRatio = Math.log(measuredMs / predictedMs);
    this.#push(this.#residuals[regime], uid, logRatio, at);
    this.#push(this.#residuals[regime], NODE, logRatio, at);
    this.#nodeMargins[regime].q = NaN;
  }

  forget(uid: string): void {
    for (const byPod of Object.values(this.#residuals)) byPod.delete(uid);
    this.#priors.delete(uid);
  }

  /** A gossiped summary of a local pod's calibration becomes its prior (undefined: none); sanitized. */
  setPrior(uid: string, summary: CalibrationSummary | undefined): void {
    const clean = sanitizeSummary(summary);
    if (clean) this.#priors.set(uid, clean);
    else this.#priors.delete(uid);
  }

  /**
   * Log margin such that predicted · exp(margin) is the q-quantile of the pod's TTFT. `uid`
   * undefined (a peer's pod, whose model this agent does not feed) gets the node's margin, with
   * `peerPrior` (the pod's own agent's summary, sanitized by the caller) as a prior.
   */
  margin(uid: string | undefined, q: number, regime: Regime = 'free', peerPrior?: CalibrationSummary): number {
    const nodeMargin = this.#nodeMargin(q, regime);
    if (uid === undefined) {
      const prior = peerPrior?.[regime];
      if (!prior) return nodeMargin;
      const node = this.#residuals[regime].get(NODE);
      return this.#withPrior(node, prior, q, this.#cold(q), this.#warmNode(q, regime, nodeMargin));
    }
    const pod = this.#residuals[regime].get(uid);
    const prior = this.#priors.size ? this.#priors.get(uid)?.[regime] : undefined;
    if (prior) return this.#withPrior(pod, prior, q, nodeMargin, this.#warmNode(q, regime, nodeMargin));
    return pod ? this.#blend(pod, q, this.#needed(q), nodeMargin) : nodeMargin;
  }

  #withPrior(r: Residuals | undefined, prior: RegimeSummary, q: number, floor: number, bound: number): number {
    const own = r ? { count: r.count, margin: this.#own(r, q) } : undefined;
    const needed = (x: number) => this.#needed(x);
    const limits = { cap: this.options.priorObservations, floor, bound, tailSlope: this.#coldSlope() };
    return blendWithPrior(own, prior, q, needed, limits);
  }

  /** The node's margin where its own window answers for q (what a prior may not go below), else -∞. */
  #warmNode(q: number, regime: Regime, nodeMargin: number): number {
    return (this.#residuals[regime].get(NODE)?.count ?? 0) >= this.#needed(q) ? nodeMargin : -Infinity;
  }

  /**
   * What this agent's own evidence says of a pod, for others: per regime with observations, its
   * margins at the median and at 90% and the observations they stand on. A pod of a few requests
   * a minute is judged by its node's window while its own is thin (as margin() does), so that
   * evidence counts; the cold floor does not travel (a receiver applies its own for thin evidence).
   */
  summary(uid: string): CalibrationSummary | undefined {
    const out: CalibrationSummary = {};
    let any = false;
    for (const regime of REGIMES) {
      const pod = this.#residuals[regime].get(uid);
      const node = this.#residuals[regime].get(NODE);
      if (!node) continue; // every pod's observation is the node's too
      const at = (q: number) => {
        const nodeOwn = this.#own(node, q);
        return pod ? this.#blend(pod, q, this.#needed(q), nodeOwn) : nodeOwn;
      };
      const median = at(SUMMARY_QUANTILES.median);
      out[regime] = { observations: Math.max(pod?.count ?? 0, node.count), median, p90: at(SUMMARY_QUANTILES.p90) };
      any = true;
    }
    return any ? out : undefined;
  }

  /** The cold margin for quantile q: log 3 at 99%, an exponential tail's scaling elsewhere. */
  #cold(q: number): number {
    return (this.options.coldLogMargin * tailPosition(q)) / tailPosition(COLD_AT);
  }

  /** The cold margin's slope per unit of log(1/(1-q)): a gossiped prior's tail rises at least this steeply. */
  #coldSlope(): number {
    return this.options.coldLogMargin / tailPosition(COLD_AT);
  }

  /** Observations before a window's own q-quantile is trusted fully. */
  #needed(q: number): number {
    return Math.max(this.options.minWarmObservations, Math.ceil(2 / (1 - q)));
  }

  /** The node's margin, kept per regime until its next observation: every peer's pod of every
   *  decision asks for it. */
  #nodeMargin(q: number, regime: Regime): number {
    const kept = this.#nodeMargins[regime];
    if (kept.q !== q) {
      const node = this.#residuals[regime].get(NODE);
      const cold = this.#cold(q);
      kept.margin = node ? this.#blend(node, q, this.#needed(q), cold) : cold;
      kept.q = q;
    }
    return kept.margin;
  }

  /** A window's margin at q, widened to `floor` while its evidence is thin (flooredByEvidence). */
  #blend(r: Residuals, q: number, needed: number, floor: number): number {
    const own = this.#own(r, q);
    return flooredByEvidence(own, Math.min(1, r.count / needed), floor);
  }

  /**
   * The pod's own evidence, and the pseudo-observations a gossiped prior still stands for beside
   * it (0: its margin is its own and its node's alone).
   */
  stats(uid: string, regime: Regime = 'free'): { observations: number; recentBias: number; priorWeight: number } {
    const r = this.#residuals[regime].get(uid);
    const prior = this.#priors.get(uid)?.[regime];
    const observations = r?.count ?? 0;
    const weight = prior ? priorWeight(prior, this.options.priorObservations, observations) : 0;
    return { observations, recentBias: r ? this.#shift(r) : 0, priorWeight: weight };
  }

  /** The window's q-quantile, raised by a recent shift; kept until the window's next observation. */
  #own(r: Residuals, q: number): number {
    if (r.ownQ !== q) {
      r.ownMargin = quantileOf(r, q) + this.#shift(r);
      r.ownQ = q;
    }
    return r.ownMargin;
  }

  #shift(r: Residuals): number {
    if (r.size < 2 * this.options.recent) return 0;
    return Math.max(0, meanOf(r, this.options.recent) - meanOf(r, r.size));
  }

  #push(byPod: Map<string, Residuals>, key: string, value: number, at: number): void {
    let r = byPod.get(key);
    if (!r) {
      r = {
        values: new Float64Array(this.options.window),
        at: new Float64Array(this.options.window),
        count: 0,
        size: 0,
        next: 0,
        sorted: new Float64Array(this.options.window),
        ownQ: NaN,
        ownMargin: 0,
      };
      byPod.set(key, r);
    }
    const cap = r.values.length;
    const oldest = () => r.at[(r.next - r.size + cap) % cap];
    if (r.size >= cap) dropOldest(r);
    while (r.size > this.options.minKept && oldest() < at - this.options.maxAgeMs) dropOldest(r);
    append(r, value, at);
    r.ownQ = NaN;
  }
}
