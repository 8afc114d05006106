// Where the agent's model of its own pods learns: the per-node TTFT model (and embeddings' own,
// all prefill), and the calibration of its errors. The pool calls it with what it measured;
// everything here is pure and time comes in as arguments.
import type { IntervalDelta, PodLoad, PredictorParams, RequestKind } from '../types.ts';
import { Calibration, type Regime } from './calibration.ts';
import type { CalibrationSummary } from './calibration-prior.ts';
import { NodeModel } from './node-model.ts';
import type { Features, PredictorOptions } from './predictor.ts';

/** Own measurements younger than this are the teacher; older, the pod's TTFT histogram is. */
const OWN_OBSERVATIONS_FRESH_MS = 5000;

/**
 * Scrapes kept per pod to find the state an interval's requests met when they arrived: their
 * TTFT before it was scraped (a 6 s TTFT at 100 ms scrapes needs the last 60). Bounded, so the
 * learner's memory per pod is fixed; an older arrival is given the oldest state kept.
 */
const ARRIVAL_HISTORY = 128;

/**
 * Calibration keeps the errors of requests that found a queue, those that found the pod's batch
 * full (`running` at its `batchLimit`), and those that found a free slot apart.
 */
export const regimeOf = (queuedAhead: number, running = 0, batchLimit = Infinity): Regime =>
  queuedAhead > 0 ? 'queued' : running >= batchLimit ? 'full' : 'free';

export class Learner {
  readonly #model: NodeModel;
  /** Embeddings are all prefill: their own model, taught by their whole answer time. */
  readonly #embeddings: NodeModel;
  readonly #calibration = new Calibration();
  /** When this agent last measured a TTFT at each pod. */
  readonly #lastOwnObservationAt = new Map<string, number>();
  /** Each pod's recent scrapes (time, waiting, running): what the scrape path's requests met. */
  readonly #history = new Map<string, ScrapeHistory>();
  /**
   * Each pod's batch limit as far as seen: the most requests it ran while it kept others queued.
   * No engine reports its batch size; a queue beside a batch is the evidence that it is full.
   */
  readonly #batchLimit = new Map<string, number>();

  constructor(predictor?: Partial<PredictorOptions>) {
    this.#model = new NodeModel(predictor);
    this.#embeddings = new NodeModel(predictor);
  }

  forget(uid: string): void {
    this.#model.forget(uid);
    this.#embeddings.forget(uid);
    this.#calibration.forget(uid);
    this.#lastOwnObservationAt.delete(uid);
    this.#history.delete(uid);
    this.#batchLimit.delete(uid);
  }

  /** A warm start from parameters learned elsewhere (NodeModel.adopt); `uid` undefined: a same-class pod's. */
  adopt(uid: string | undefined, params: PredictorParams): void {
    this.#model.adopt(uid, params);
  }

  params(uid: string): PredictorParams {
    return this.#model.params(uid);
  }

  /** A local pod's calibration as gossiped before (a prior: Calibration.setPrior). */
  adoptCalibration(uid: string, summary: CalibrationSummary | undefined): void {
    this.#calibration.setPrior(uid, summary);
  }

  /** What this agent's own evidence says of a local pod's errors, for gossip. */
  calibrationSummary(uid: string): CalibrationSummary | undefined {
    return this.#calibration.summary(uid);
  }

  embeddingParams(uid: string): PredictorParams {
    return this.#embeddings.params(uid);
  }

  /**
   * Log-margin over the mean for quantile q of a request that finds `queuedAhead` queued and
   * `running` in the batch; `uid` undefined: the node's (a peer's pod, whose batch limit is not
   * known), with `peerPrior` (what the pod's own agent gossiped of its calibration) as a prior.
   */
  logMargin(
    uid: string | undefined,
    q: number,
    queuedAhead: number,
    running = 0,
    peerPrior?: CalibrationSummary,
  ): number {
    return this.#calibration.margin(uid, q, this.#regime(uid, queuedAhead, running), peerPrior);
  }

  /**
   * How far the mean model falls short, in log, for a request that finds the pod's batch full and
   * nothing queued: the median of that regime's errors (0 in the other regimes, where the model's
   * features see the wait).
   */
  fullBatchLogBias(uid: string, queuedAhead: number, running: number): number {
    if (this.#regime(uid, queuedAhead, running) !== 'full') return 0;
    return Math.max(0, this.#calibration.margin(uid, 0.5, 'full'));
  }

  /** The pod's batch limit as far as seen (undefined: never seen queueing). */
  batchLimit(uid: string): number | undefined {
    return this.#batchLimit.get(uid);
  }

  #regime(uid: string | undefined, queuedAhead: number, running: number): Regime {
    return regimeOf(queuedAhead, running, uid === undefined ? undefined : this.#batchLimit.get(uid));
  }

  predict(uid: string, kind: RequestKind, features: Features): number {
    return this.#modelFor(kind).predict(uid, features);
  }

  /** A TTFT measured on a request sent on prediction `predictedMs` (an embedding's whole answer counts). */
  observeTtft(uid: string, kind: RequestKind, features: Features, predictedMs: number, ms: number, now: number): void {
    this.#lastOwnObservationAt.set(uid, now);
    this.#calibration.observe(uid, predictedMs, ms, this.#regime(uid, features.queued, features.running), now);
    this.#modelFor(kind).observe(uid, features, ms);
  }

  /**
   * A non-streamed generation's answer time also holds its decode, which the agent cannot
   * separate; the pod's own TTFT histogram teaches the mean for it (observeScrape). But the
   * answer bounds the TTFT: one that came sooner than the predicted TTFT proves the prediction
   * too high, so it is learned as an (upper-bound) TTFT. Without this, a fast pod serving only
   * non-streamed requests keeps the prior's idle cost per queued request and is throttled far
   * below its capacity. Not fed to calibration: not a measured TTFT.
   */
  observeAnswer(uid: string, kind: RequestKind, features: Features, predictedMs: number, ms: number): void {
    if (ms < predictedMs) this.#modelFor(kind).observe(uid, features, ms);
  }

  /**
   * No streamed requests of our own to learn from lately (other agents' or direct traffic is all
   * this pod gets): learn from the pod's own TTFT histogram instead, with the state at the
   * previous scrape as the features those requests met. Coarser, so only as a fallback.
   */
  observeScrape(uid: string, previous: PodLoad | undefined, load: PodLoad, delta: IntervalDelta | undefined): void {
    let history = this.#history.get(uid);
    if (!history) this.#history.set(uid, (history = new ScrapeHistory(ARRIVAL_HISTORY)));
    if (previous && history.size === 0) history.push(previous);
    history.push(load);
    if (load.waiting > 0 && load.running > (this.#batchLimit.get(uid) ?? 0)) this.#batchLimit.set(uid, load.running);
    const lastOwn = this.#lastOwnObservationAt.get(uid) ?? -Infinity;
    if (!previous || !delta?.ttft || delta.ttft.count <= 0 || load.at - lastOwn <= OWN_OBSERVATIONS_FRESH_MS) return;
    // Tokens the pod computed, not those its prefix cache served: cache hits make TTFTs short, and
    // learning them against whole prompts would teach that long prompts are cheap.
    const computed = delta.computedPromptTokens ?? delta.promptTokens;
    const promptTokens = computed !== undefined ? Math.max(1, computed / delta.ttft.count) : 256;
    // The interval's requests met the pod as it was when they arrived, one TTFT before this
    // scrape: the previous scrape for TTFTs shorter than the interval, an older one for longer.
    // Taken from the previous scrape alone, a saturated pod's seconds-long TTFTs were learned as
    // met with no queue whenever its queue had just drained, and taught the own prefill's `base`
    // the wait (3 s at 1.6× load in bench:routing-prefix, non-streamed).
    const ttftMs = delta.ttft.mean * 1000;
    const met = history.metAt(Math.min(previous.at, load.at - ttftMs)) ?? previous;
    this.#model.observe(uid, { queued: met.waiting, running: met.running, promptTokens }, ttftMs);
  }

  /** For /debug/state. */
  stats(uid: string) {
    const regime = (r: Regime) => ({
      ...this.#calibration.stats(uid, r),
      logMargin99: this.#calibration.margin(uid, 0.99, r),
    });
    return {
      predictor: { params: this.#model.params(uid), ...this.#model.stats(uid) },
      embeddingsPredictor: { params: this.#embeddings.params(uid), ...this.#embeddings.stats(uid) },
      calibration: { free: regime('free'), full: regime('full'), queued: regime('queued') },
      batchLimit: this.#batchLimit.get(uid),
    };
  }

  #modelFor(kind: RequestKind): NodeModel {
    return kind === 'embeddings' ? this.#embeddings : this.#model;
  }
}

/** A bounded ring of a pod's recent scrapes: time, waiting and running. */
class ScrapeHistory {
  readonly #at: Float64Array;
  readonly #waiting: Float64Array;
  readonly #running: Float64Array;
  #next = 0;
  size = 0;

  constructor(capacity: number) {
    this.#at = new Float64Array(capacity);
    this.#waiting = new Float64Array(capacity);
    this.#running = new Float64Array(capacity);
  }

  push(load: PodLoad): void {
    const n = this.#at.length;
    const last = (this.#next + n - 1) % n;
    if (this.size > 0 && load.at <= this.#at[last]) return;
    this.#at[this.#next] = load.at;
    this.#waiting[this.#next] = load.waiting;
    this.#running[this.#next] = load.running;
    this.#next = (this.#next + 1) % n;
    if (this.size < n) this.size++;
  }

  /**
   * The latest scrape at or before `t` (the oldest kept if all are later); but when that one
   * found the pod empty and the next did not, the next: an arrival between them came with the
   * burst the next one shows. Taken from the empty one, the burst's wait was learned as idle cost
   * (`base`), and a pod predicted slow gets no traffic to correct it (an agent's own pod stayed at
   * 2x its idle TTFT after a burst in test/gossip-agents).
   */
  metAt(t: number): { waiting: number; running: number } | undefined {
    const n = this.#at.length;
    if (this.size === 0) return undefined;
    const newest = (this.#next + n - 1) % n;
    let i = newest;
    for (let k = 1; k < this.size && this.#at[i] > t; k++) i = (i + n - 1) % n;
    if (i !== newest && this.#at[i] <= t && this.#waiting[i] === 0 && this.#running[i] === 0) i = (i + 1) % n;
    return { waiting: this.#waiting[i], running: this.#running[i] };
  }
}
