// Router candidates built from the pool's records: a local pod from its scraped telemetry and the
// learned model, a peer's pod from its gossiped estimate. Both carry this agent's own counts.
import { adapterCostMs, DEFAULT_LORA_COSTS, type LoraCosts } from '../route/lora.ts';
import type { Learner } from '../predict/learner.ts';
import type { Candidate, WindowedMetric } from '../route/candidate.ts';
import { staleAfterMs } from '../telemetry/scraper.ts';
import type { PodTelemetry } from '../telemetry/pod-telemetry.ts';
import type { Pod, PodEstimate, PodLoad, PredictorParams, RouteRequest } from '../types.ts';
import { DEFAULT_LEAVABLE_BATCH_RESERVE, type PoolOptions } from './options.ts';
import { localHealthy, sendRate, type LocalPod } from './pod-records.ts';
import type { PeerTraffic } from './peer-traffic.ts';

/** What a pod is ranked on with no request at hand (peer shortlists, /debug/state, the dashboard): a typical chat turn. */
export const REFERENCE_REQUEST: RouteRequest = {
  kind: 'chat',
  model: '',
  tenant: '',
  namespace: '',
  tags: [],
  promptTokens: 256,
  stream: true,
};

export type CandidateSettings = Pick<
  PoolOptions,
  | 'scrapeIntervalMs'
  | 'scrapeTimeoutMs'
  | 'peerMaxAgeMs'
  | 'networkCostMs'
  | 'maxInFlightPerPod'
  | 'referenceWindowMs'
  | 'loraCosts'
  | 'leavableBatchReserve'
>;

export function localCandidate(
  local: LocalPod,
  now: number,
  learner: Learner,
  settings: CandidateSettings,
  expectedCachedTokens = 0,
  prefixSource?: 'precise' | 'approximate',
): Candidate {
  return new LocalCandidate(local, now, learner, settings, expectedCachedTokens, prefixSource);
}

export function peerCandidate(
  estimate: PodEstimate,
  traffic: PeerTraffic | undefined,
  now: number,
  learner: Learner,
  settings: CandidateSettings,
  expectedCachedTokens = 0,
): Candidate {
  return new PeerCandidate(estimate, traffic, now, learner, settings, expectedCachedTokens);
}

// Candidates are built for every request (tens of them per decision), so what a candidate holds
// is what the GC must clear after every decision (bench:micro's p99 is that GC). As class
// instances their `average` and `logMargin` are shared methods, not closures; what a candidate
// reads from a record that is never changed in place (a peer's gossiped estimate, a scraped load,
// the settings) is an accessor over that record, not a copy; what can change after the decision
// (this agent's counts, health) is copied, so a candidate still says what the decision saw. A
// copy by spread loses the methods and accessors, so don't.

class LocalCandidate implements Candidate {
  readonly pod: Pod;
  readonly ageMs: number;
  readonly maxAgeMs: number;
  readonly healthy: boolean;
  readonly unhealthyReason?: string;
  readonly params: PredictorParams;
  readonly inFlight: number;
  readonly unseenSent: number;
  readonly pendingPromptTokens: number;
  readonly pendingRequests: number;
  readonly expectedCachedTokens: number;
  readonly prefixSource: 'precise' | 'approximate' | undefined;
  readonly #load: PodLoad | undefined;
  readonly #telemetry: PodTelemetry | undefined;
  readonly #now: number;
  readonly #learner: Learner;
  readonly #cap: number | undefined;
  /** The pod's fading send count as of this decision (sentPerMs, read only where a prefix is recomputed). */
  readonly #sends: Pick<LocalPod, 'recentSends' | 'recentSendsAt'>;
  readonly #windowMs: number;
  readonly #sentAdapters: ReadonlyMap<string, number> | undefined;
  readonly #loraCosts: LoraCosts | undefined;
  readonly #reserve: number;
  /** Only embeddings requests read it: made on first use. */
  #embeddingParams: PredictorParams | undefined;

  constructor(
    local: LocalPod,
    now: number,
    learner: Learner,
    settings: CandidateSettings,
    expectedCachedTokens: number,
    prefixSource: 'precise' | 'approximate' | undefined,
  ) {
    const telemetry = local.telemetry;
    const load = telemetry?.latest;
    this.pod = local.pod;
    this.ageMs = now - (load?.at ?? -Infinity);
    this.maxAgeMs = staleAfterMs(
      { intervalMs: settings.scrapeIntervalMs, timeoutMs: settings.scrapeTimeoutMs ?? 0 },
      local.scrapeFailedSinceGood,
    );
    this.healthy = localHealthy(local, now);
    if (local.implausible !== undefined) this.unhealthyReason = local.implausible;
    this.params = learner.params(local.pod.uid);
    this.inFlight = local.inFlight;
    this.unseenSent = local.unseenSent;
    this.pendingPromptTokens = local.pendingPromptTokens;
    this.pendingRequests = local.pendingRequests;
    this.expectedCachedTokens = expectedCachedTokens;
    this.prefixSource = prefixSource;
    this.#load = load;
    this.#telemetry = telemetry;
    this.#now = now;
    this.#learner = learner;
    this.#cap = settings.maxInFlightPerPod;
    this.#sends = { recentSends: local.recentSends, recentSendsAt: local.recentSendsAt };
    this.#windowMs = settings.referenceWindowMs;
    this.#sentAdapters = local.sentAdapters;
    this.#loraCosts = settings.loraCosts;
    this.#reserve = settings.leavableBatchReserve ?? DEFAULT_LEAVABLE_BATCH_RESERVE;
  }

  /** What running `adapter` here adds to the TTFT (0 when it is no adapter of this pod). */
  adapterCostMs(adapter: string): number {
    const lora = this.#load?.lora;
    if (!lora || !this.pod.adapters?.includes(adapter)) return 0;
    const view = { ...lora, sentSince: this.#sentAdapters ? [...this.#sentAdapters.keys()] : [] };
    return adapterCostMs(view, adapter, this.#loraCosts ?? DEFAULT_LORA_COSTS);
  }

  get where(): 'local' {
    return 'local';
  }
  get networkCostMs(): number {
    return 0;
  }
  get queuedNow(): number {
    return this.#load?.waiting ?? 0;
  }
  get running(): number {
    return this.#load?.running ?? 0;
  }
  get kvCache(): number {
    return this.#load?.kvCache ?? NaN;
  }
  get maxInFlight(): number {
    return maxInFlight(this.pod, this.#cap);
  }
  get sentPerMs(): number {
    return sendRate(this.#sends, this.#now, this.#windowMs);
  }
  get embeddingParams(): PredictorParams {
    return (this.#embeddingParams ??= this.#learner.embeddingParams(this.pod.uid));
  }

  average(metric: WindowedMetric, windowMs: number): number {
    if (!this.#telemetry) return 0;
    const value = this.#telemetry.average(metric, windowMs, this.#now);
    return Number.isNaN(value) ? 0 : value;
  }

  // (A window that knows nothing averages NaN, read as 0 above: never certain here, so average() says.)
  averageAtMost(metric: WindowedMetric, windowMs: number, limit: number): boolean {
    return this.#telemetry?.averageAtMost(metric, windowMs, limit, this.#now) ?? false;
  }

  meanLogBias(): number {
    return this.#learner.fullBatchLogBias(this.pod.uid, this.queuedNow + this.unseenSent, this.running);
  }

  /** Only requests that may leave are admitted on it: they see the batch's reserve as taken. */
  logMargin(q: number): number {
    const limit = this.#learner.batchLimit(this.pod.uid);
    const reserved = limit === undefined ? 0 : Math.ceil(limit * this.#reserve);
    return this.#learner.logMargin(this.pod.uid, q, this.queuedNow + this.unseenSent, this.running + reserved);
  }
}

class PeerCandidate implements Candidate {
  readonly ageMs: number;
  readonly healthy: boolean;
  readonly inFlight: number;
  readonly unseenSent: number;
  readonly pendingPromptTokens: number;
  readonly pendingRequests: number;
  readonly #estimate: PodEstimate;
  readonly #learner: Learner;
  readonly #settings: CandidateSettings;
  readonly #cached: number;

  constructor(
    estimate: PodEstimate,
    traffic: PeerTraffic | undefined,
    now: number,
    learner: Learner,
    settings: CandidateSettings,
    cached: number,
  ) {
    this.#cached = cached;
    this.ageMs = Math.max(0, now - estimate.at);
    this.healthy = now >= (traffic?.unhealthyUntil ?? 0);
    this.inFlight = traffic?.inFlight ?? 0;
    this.unseenSent = traffic?.unseenSent ?? 0;
    this.pendingPromptTokens = traffic?.pendingPromptTokens ?? 0;
    this.pendingRequests = traffic?.pendingRequests ?? 0;
    this.#estimate = estimate;
    this.#learner = learner;
    this.#settings = settings;
  }

  get pod(): Pod {
    return this.#estimate.pod;
  }
  get where(): 'peer' {
    return 'peer';
  }
  get maxAgeMs(): number {
    return this.#settings.peerMaxAgeMs;
  }
  get queuedNow(): number {
    return this.#estimate.queuedNow;
  }
  get running(): number {
    return this.#estimate.running;
  }
  get kvCache(): number {
    return this.#estimate.kvCache;
  }
  get params(): PredictorParams {
    return this.#estimate.params;
  }
  get maxInFlight(): number {
    return maxInFlight(this.#estimate.pod, this.#settings.maxInFlightPerPod);
  }
  get networkCostMs(): number {
    return this.#settings.networkCostMs;
  }
  // From the pod's gossiped prefix summary, where its agent follows its KV events; else none.
  get expectedCachedTokens(): number {
    return this.#cached;
  }
  get prefixSource(): 'gossip' | undefined {
    return this.#cached > 0 ? 'gossip' : undefined;
  }

  /** What running `adapter` there adds (a peer's pod is a candidate only for adapters it holds). */
  adapterCostMs(adapter: string): number {
    const lora = this.#estimate.lora;
    if (!lora || !this.pod.adapters?.includes(adapter)) return 0;
    return adapterCostMs({ ...lora, sentSince: [] }, adapter, this.#settings.loraCosts ?? DEFAULT_LORA_COSTS);
  }

  /** A peer gossips one reference window; it stands in for whatever window a rule names. */
  average(metric: WindowedMetric): number {
    const estimate = this.#estimate;
    return metric === 'queued' ? estimate.queued : metric === 'running' ? estimate.running : estimate.kvCache;
  }

  /**
   * Gossip carries one model and no error distribution: a peer's pod is judged with the node's
   * own calibration (how far this agent's kind of prediction strays), floored cold.
   */
  logMargin(q: number): number {
    return this.#learner.logMargin(undefined, q, this.queuedNow + this.unseenSent);
  }
}

/** The pod's own concurrency when known (its max-num-seqs), within the configured cap. */
function maxInFlight(pod: Pod, cap = Infinity): number {
  return Math.min(cap, pod.maxConcurrency ?? Infinity);
}
