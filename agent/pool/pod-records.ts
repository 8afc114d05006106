// What the pool keeps per pod. This agent's own counts of what it sent a pod cover the gap
// between two reports of that pod (a scrape for its own, a gossip update for a peer's), when
// every agent would otherwise see the same stale queue.
import type { Pod } from '../types.ts';
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
  /** This agent's prompt tokens sent to the pod still to prefill as of `backlogAt` (prefillAhead). */
  backlogTokens: number;
  backlogAt: number;
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

/**
 * Of this agent's prompt tokens at the pod without a first token, those the pod has still to
 * prefill now: what was sent, less what the pod prefills in the time since at its own learned
 * cost (`msPerKTokens`, the model's perKPromptTokens), first come first served, and never more
 * than are still awaiting a first token. The sum of pending prompts counts a 3,000-token miss
 * in full until its first token, when most of it is done after the first steps: a hit sent
 * 500 ms behind it waited for ~1,000 tokens, not 3,000; fitted on those sums, the wait's
 * per-token cost came out at a third of the prefill's (bench:routing-prefix, shared prompts over
 * mixed speeds: 50–90 ms per 1k tokens against ~270), and hits behind a miss were predicted at
 * 200–300 ms and took 500–1,000.
 */
export function prefillAhead(
  local: Pick<LocalPod, 'backlogTokens' | 'backlogAt' | 'pendingPromptTokens'>,
  now: number,
  msPerKTokens: number,
): number {
  const elapsed = Math.max(0, now - local.backlogAt);
  const done = msPerKTokens > 0 ? (elapsed * 1000) / msPerKTokens : 0;
  return Math.min(local.pendingPromptTokens, Math.max(0, local.backlogTokens - done));
}

/** `tokens` more to prefill were just sent to `local` (their part of prefillAhead). */
export function addBacklog(local: LocalPod, now: number, msPerKTokens: number, tokens: number): void {
  local.backlogTokens = prefillAhead(local, now, msPerKTokens) + tokens;
  local.backlogAt = now;
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
    backlogTokens: 0,
    backlogAt: 0,
  };
}

/** Whether a local pod may take requests now: the router's candidate and the debug view agree. */
export function localHealthy(local: LocalPod, now: number): boolean {
  return now >= local.unhealthyUntil && local.implausible === undefined;
}
