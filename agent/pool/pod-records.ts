// What the pool keeps per pod. This agent's own counts of what it sent a pod cover the gap
// between two reports of that pod (a scrape for its own, a gossip update for a peer's), when
// every agent would otherwise see the same stale queue.
import type { Pod, PodEstimate, PodLoad } from '../types.ts';
import type { PoolOptions } from './options.ts';
import type { PodTelemetry } from '../telemetry/pod-telemetry.ts';

/** Counts a request ticket moves, the same for local and peers' pods. */
export interface RequestCounters {
  inFlight: number;
  pendingPromptTokens: number;
  /** Requests whose prompt tokens `pendingPromptTokens` counts: those still awaiting their first token. */
  pendingRequests: number;
  unseenSent: number;
  /** Counts reports: a request answered in the epoch it was sent in leaves `unseenSent` at once. */
  epoch: number;
}

export interface LocalPod extends RequestCounters {
  pod: Pod;
  /** The scraper's record of the pod (windows, latest load and when): the one record of its
   *  scraped state; absent until the first good scrape. */
  telemetry: PodTelemetry | undefined;
  unhealthyUntil: number;
  /** Why its last page was refused (telemetry trust boundary); unhealthy until a plausible one. */
  implausible: string | undefined;
  /** A scrape failed since the last good one: its age is judged without the scrape timeout's grace. */
  scrapeFailedSinceGood: boolean;
  /** Prompt tokens the pod computed (not served from cache) since we know it: the prefix index's clock. */
  computedTokens: number;
  /** This agent's requests sent to the pod, each fading with age (sendRate), and when last updated. */
  recentSends: number;
  recentSendsAt: number;
  /** LoRA adapters this agent sent to the pod since its last scrape, and when (absent: none yet). */
  sentAdapters?: Map<string, number>;
}

/** Adds one send to `local`'s fading count: each counts exp(−age / windowMs). */
export function countSend(local: LocalPod, now: number, windowMs: number): void {
  local.recentSends = local.recentSends * Math.exp(-Math.max(0, now - local.recentSendsAt) / windowMs) + 1;
  local.recentSendsAt = now;
}

/** This agent's sends to `local` per ms over about the last `windowMs`. */
export function sendRate(
  local: Pick<LocalPod, 'recentSends' | 'recentSendsAt'>,
  now: number,
  windowMs: number,
): number {
  return (local.recentSends * Math.exp(-Math.max(0, now - local.recentSendsAt) / windowMs)) / windowMs;
}

export function newLocalPod(pod: Pod): LocalPod {
  return {
    pod,
    telemetry: undefined,
    inFlight: 0,
    pendingPromptTokens: 0,
    pendingRequests: 0,
    unseenSent: 0,
    unhealthyUntil: 0,
    implausible: undefined,
    scrapeFailedSinceGood: false,
    epoch: 0,
    computedTokens: 0,
    recentSends: 0,
    recentSendsAt: 0,
  };
}

/** Whether a local pod may take requests now: the router's candidate and the debug view agree. */
export function localHealthy(local: LocalPod, now: number): boolean {
  return now >= local.unhealthyUntil && local.implausible === undefined;
}

/** What this agent gossips about one of its own pods (`load`: its latest good scrape; gossip numbers the version). */
export function localEstimate(
  local: LocalPod,
  load: PodLoad,
  now: number,
  params: PodEstimate['params'],
  options: Pick<PoolOptions, 'node' | 'referenceWindowMs'>,
  extras: Pick<PodEstimate, 'prefixSummary' | 'lora'>,
): PodEstimate {
  const queued = local.telemetry?.waiting.average(options.referenceWindowMs, now) ?? NaN;
  return {
    pod: local.pod,
    queued: Number.isNaN(queued) ? load.waiting : queued,
    queuedNow: load.waiting,
    running: load.running,
    kvCache: load.kvCache,
    params,
    at: load.at,
    origin: options.node,
    version: 0,
    ...extras,
  };
}
