// Router candidates built from the pool's records: a local pod from its scraped telemetry and the
// learned model, a peer's pod from its gossiped estimate. Both carry this agent's own counts.
import type { Learner } from '../predict/learner.ts';
import type { Candidate, WindowedMetric } from '../route/candidate.ts';
import { staleAfterMs } from '../telemetry/scraper.ts';
import type { Pod, PodEstimate, RouteRequest } from '../types.ts';
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
  const telemetry = local.telemetry;
  const load = telemetry?.latest;
  return {
    pod: local.pod,
    where: 'local',
    ageMs: now - (load?.at ?? -Infinity),
    maxAgeMs: staleAfterMs(
      { intervalMs: settings.scrapeIntervalMs, timeoutMs: settings.scrapeTimeoutMs ?? 0 },
      local.scrapeFailedSinceGood,
    ),
    healthy: localHealthy(local, now),
    ...(local.implausible !== undefined ? { unhealthyReason: local.implausible } : {}),
    queuedNow: load?.waiting ?? 0,
    running: load?.running ?? 0,
    kvCache: load?.kvCache ?? NaN,
    average: (metric: WindowedMetric, windowMs: number) => {
      if (!telemetry) return 0;
      const value = telemetry.average(metric, windowMs, now);
      return Number.isNaN(value) ? 0 : value;
    },
    params: learner.params(local.pod.uid),
    embeddingParams: learner.embeddingParams(local.pod.uid),
    logMargin: (q: number) => learner.logMargin(local.pod.uid, q, (load?.waiting ?? 0) + local.unseenSent),
    inFlight: local.inFlight,
    maxInFlight: maxInFlight(local.pod, settings.maxInFlightPerPod),
    unseenSent: local.unseenSent,
    pendingPromptTokens: local.pendingPromptTokens,
    networkCostMs: 0,
    expectedCachedTokens,
  };
}

export function peerCandidate(
  estimate: PodEstimate,
  traffic: PeerTraffic | undefined,
  now: number,
  learner: Learner,
  settings: CandidateSettings,
): Candidate {
  return {
    pod: estimate.pod,
    where: 'peer',
    ageMs: Math.max(0, now - estimate.at),
    maxAgeMs: settings.peerMaxAgeMs,
    healthy: now >= (traffic?.unhealthyUntil ?? 0),
    queuedNow: estimate.queuedNow,
    running: estimate.running,
    kvCache: estimate.kvCache,
    // A peer gossips one reference window; it stands in for whatever window a rule names.
    average: (metric: WindowedMetric) =>
      metric === 'queued' ? estimate.queued : metric === 'running' ? estimate.running : estimate.kvCache,
    params: estimate.params,
    // Gossip carries one model and no error distribution: a peer's pod is judged with the
    // node's own calibration (how far this agent's kind of prediction strays), floored cold.
    logMargin: (q: number) => learner.logMargin(undefined, q, estimate.queuedNow + (traffic?.unseenSent ?? 0)),
    inFlight: traffic?.inFlight ?? 0,
    maxInFlight: maxInFlight(estimate.pod, settings.maxInFlightPerPod),
    unseenSent: traffic?.unseenSent ?? 0,
    pendingPromptTokens: traffic?.pendingPromptTokens ?? 0,
    networkCostMs: settings.networkCostMs,
    // No prefix estimate for peers' pods: a conversation reaches one agent per client
    // connection, and a per-pod summary in gossip would cost bandwidth for rare wins.
    expectedCachedTokens: 0,
  };
}

/** The pod's own concurrency when known (its max-num-seqs), within the configured cap. */
function maxInFlight(pod: Pod, cap = Infinity): number {
  return Math.min(cap, pod.maxConcurrency ?? Infinity);
}
