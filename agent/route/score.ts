// Predict, then score: the predicted TTFT of a request at a candidate, and the score that ranks
// candidates from it (lower is better, in milliseconds).
import { predictFrom } from '../predict/predictor.ts';
import type { RouteRequest } from '../types.ts';
import type { Candidate } from './candidate.ts';

/** Predicted TTFT (ms) of this request at the candidate. */
export type Predict = (c: Candidate, r: RouteRequest) => number;
/** Ranks a candidate given its prediction for this request: lower is better. */
export type Score = (c: Candidate, predictedMs: number, r: RouteRequest, among: Among) => number;

/** What a score may know of the other candidates of the same decision (filled once per decision). */
export interface Among {
  /** The longest cached prefix (tokens) any candidate is expected to hold for this request. */
  mostCachedTokens: number;
}

/**
 * Predicted TTFT at the pod for the prompt tokens it has not cached, counting the requests this agent sent since the pod's last report
 * as queue the pod hasn't shown yet (between scrapes every agent sees the same stale queue, so
 * without this a burst would all land on the one pod that looked idle), plus the network cost.
 */
export const predictedTtft: Predict = (c, r) =>
  predictFrom(
    r.kind === 'embeddings' ? (c.embeddingParams ?? c.params) : c.params,
    c.queuedNow + c.unseenSent,
    c.running,
    uncachedPromptTokens(r.promptTokens, c.expectedCachedTokens),
    c.pendingPromptTokens,
  ) + c.networkCostMs;

/**
 * The prompt tokens the pod must compute: a cached prefix costs no prefill. At least 1, as the
 * engine always computes the last token. The model's perKPromptTokens prices these alone, so a
 * pod holding the prefix wins exactly when the prefill it saves outweighs its queue.
 */
export function uncachedPromptTokens(promptTokens: number, cachedTokens = 0): number {
  return cachedTokens > 0 ? Math.max(1, promptTokens - cachedTokens) : promptTokens;
}

/** A pod's TTFT for a typical request when idle: its speed, in ms. */
const REFERENCE_PROMPT_TOKENS = 256;
export function unloadedTtft(c: Candidate): number {
  return predictFrom(c.params, 0, 0, REFERENCE_PROMPT_TOKENS, 0);
}

/**
 * The prediction, plus a share of what the pod already holds, priced at its speed. Always
 * taking the lowest prediction is greedy: fast pods fill until their queues form, and every
 * request that arrives next pays for it. Pricing the requests a pod holds (running, queued,
 * sent but unseen) at its idle TTFT spreads load in proportion to speed before queues form.
 * Measured in bench/routing (4 seeds, 6 load mixes): weight 0.3 was at or above least-request
 * everywhere and 8–10 SLO points above pure prediction on heterogeneous pods; 0 (pure
 * prediction) lost to least-request on heterogeneous pools.
 */
export function predictionPlusLoad(weight: number): Score {
  return (c, predictedMs, _r, among) => {
    const queued = c.queuedNow + c.unseenSent;
    return (
      predictedMs + weight * unloadedTtft(c) * (c.running + queued) + recomputeCost(c, among, awaitingFirstToken(c))
    );
  };
}

/**
 * The wait a pod's recomputing of a prefix another candidate holds adds for the requests that
 * queue behind it. The prediction prices this request's own TTFT only; but tokens prefilled again
 * are work nobody needed, and the requests that join the pod behind this one wait for it, once
 * each. In a queue that neither grows nor shrinks as many join behind a request as it found
 * ahead, so the tokens a pod would recompute beyond the best holder are priced at the pod's own
 * per-token cost times the requests ahead (awaitingFirstToken): nothing when none are, or when no
 * candidate holds more of the prompt (no prefix sharing: every decision as before). Under
 * overload it keeps conversations on the pods holding their history; sent to the shortest
 * prediction, their histories' prefill fed the overload (bench:routing-prefix, multi-turn at
 * 160 %, seeds 5–9: p90 366 → 287 ms).
 */
function recomputeCost(c: Candidate, among: Among, ahead: number): number {
  const recomputed = among.mostCachedTokens - (c.expectedCachedTokens ?? 0);
  return recomputed > 0 && ahead > 0 ? ((c.params.perKPromptTokens * recomputed) / 1000) * ahead : 0;
}

/**
 * Requests ahead of a new one at the pod, still without a first token: those queued (and sent but
 * unseen), or this agent's own not yet answered, whichever is more. With chunked prefill a full
 * batch admits requests it has not finished prefilling, and the pod counts them as running, not
 * waiting: under overload its waiting count stays at 0–2 while ten of this agent's requests wait
 * for their first token there (bench:routing-prefix, multi-turn at 160 %, seed 7,021).
 */
function awaitingFirstToken(c: Candidate): number {
  return Math.max(c.queuedNow + c.unseenSent, c.pendingRequests ?? 0);
}
