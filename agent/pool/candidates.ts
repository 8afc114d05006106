// Router candidates built from the pool's records: a local pod from its scraped telemetry and the
// learned model, a peer's pod from its gossiped estimate. Both carry this agent's own counts.
import type { Learner } from '../predict/learner.ts';
import type { Candidate, WindowedMetric } from '../route/candidate.ts';
import { staleAfterMs } from '../telemetry/scraper.ts';
import type { PodTelemetry } from '../telemetry/pod-telemetry.ts';
import type { Pod, PodEstimate, PredictorParams, RouteRequest } from '../types.ts';
import type { PoolOptions } from './options.ts';
import { localHealthy, type LocalPod } from './pod-records.ts';
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
  'scrapeIntervalMs' | 'scrapeTimeoutMs' | 'peerMaxAgeMs' | 'networkCostMs' | 'maxInFlightPerPod'
>;

export function localCandidate(
  local: LocalPod,
  now: number,
  learner: Learner,
  settings: CandidateSettings,
  expectedCachedTokens = 0,
): Candidate {
  return new LocalCandidate(local, now, learner, settings, expectedCachedTokens);
}

export function peerCandidate(
  estimate: PodEstimate,
  traffic: PeerTraffic | undefined,
  now: number,
  learner: Learner,
  settings: CandidateSettings,
): Candidate {
  return new PeerCandidate(estimate, traffic, now, learner, settings);
}

// Candidates are built for every request (tens of them per decision): as class instances their
// `average` and `logMargin` are shared methods, not two closures and a context per candidate,
// which kept the GC busy enough to set decide()'s p99 (bench:micro). Fields are plain data, so a
// candidate reads the same as an object literal; a copy by spread loses the methods, so don't.

class LocalCandidate implements Candidate {
  readonly pod: Pod;
  readonly where = 'local' as const;
  readonly ageMs: number;
  readonly maxAgeMs: number;
  readonly healthy: boolean;
  readonly unhealthyReason?: string;
  readonly queuedNow: number;
  readonly running: number;
  readonly kvCache: number;
  readonly params: PredictorParams;
  readonly embeddingParams: PredictorParams;
  readonly inFlight: number;
  readonly maxInFlight: number;
  readonly unseenSent: number;
  readonly pendingPromptTokens: number;
  readonly networkCostMs = 0;
  readonly expectedCachedTokens: number;
  readonly #telemetry: PodTelemetry | undefined;
  readonly #now: number;
  readonly #learner: Learner;

  constructor(
    local: LocalPod,
    now: number,
    learner: Learner,
    settings: CandidateSettings,
    expectedCachedTokens: number,
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
    this.queuedNow = load?.waiting ?? 0;
    this.running = load?.running ?? 0;
    this.kvCache = load?.kvCache ?? NaN;
    this.params = learner.params(local.pod.uid);
    this.embeddingParams = learner.embeddingParams(local.pod.uid);
    this.inFlight = local.inFlight;
    this.maxInFlight = maxInFlight(local.pod, settings.maxInFlightPerPod);
    this.unseenSent = local.unseenSent;
    this.pendingPromptTokens = local.pendingPromptTokens;
    this.expectedCachedTokens = expectedCachedTokens;
    this.#telemetry = telemetry;
    this.#now = now;
    this.#learner = learner;
  }

  average(metric: WindowedMetric, windowMs: number): number {
    if (!this.#telemetry) return 0;
    const value = this.#telemetry.average(metric, windowMs, this.#now);
    return Number.isNaN(value) ? 0 : value;
  }

  logMargin(q: number): number {
    return this.#learner.logMargin(this.pod.uid, q, this.queuedNow + this.unseenSent);
  }
}

class PeerCandidate implements Candidate {
  readonly pod: Pod;
  readonly where = 'peer' as const;
  readonly ageMs: number;
  readonly maxAgeMs: number;
  readonly healthy: boolean;
  readonly queuedNow: number;
  readonly running: number;
  readonly kvCache: number;
  readonly params: PredictorParams;
  readonly inFlight: number;
  readonly maxInFlight: number;
  readonly unseenSent: number;
  readonly pendingPromptTokens: number;
  readonly networkCostMs: number;
  // No prefix estimate for peers' pods: a conversation reaches one agent per client
  // connection, and a per-pod summary in gossip would cost bandwidth for rare wins.
  readonly expectedCachedTokens = 0;
  readonly #estimate: PodEstimate;
  readonly #learner: Learner;

  constructor(
    estimate: PodEstimate,
    traffic: PeerTraffic | undefined,
    now: number,
    learner: Learner,
    settings: CandidateSettings,
  ) {
    this.pod = estimate.pod;
    this.ageMs = Math.max(0, now - estimate.at);
    this.maxAgeMs = settings.peerMaxAgeMs;
    this.healthy = now >= (traffic?.unhealthyUntil ?? 0);
    this.queuedNow = estimate.queuedNow;
    this.running = estimate.running;
    this.kvCache = estimate.kvCache;
    this.params = estimate.params;
    this.inFlight = traffic?.inFlight ?? 0;
    this.maxInFlight = maxInFlight(estimate.pod, settings.maxInFlightPerPod);
    this.unseenSent = traffic?.unseenSent ?? 0;
    this.pendingPromptTokens = traffic?.pendingPromptTokens ?? 0;
    this.networkCostMs = settings.networkCostMs;
    this.#estimate = estimate;
    this.#learner = learner;
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
