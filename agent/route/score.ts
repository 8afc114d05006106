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
 * without this a burst would all land on the one pod that looked idle), plus the network cost
 * and, for a LoRA adapter, loading it or waiting for a slot (agent/route/lora.ts).
 */
export const predictedTtft: Predict = (c, r) =>
  predictFrom(
    r.kind === 'embeddings' ? (c.embeddingParams ?? c.params) : c.params,
    c.queuedNow + c.unseenSent,
    c.running,
    uncachedPromptTokens(r.promptTokens, c.expectedCachedTokens),
    c.pendingPromptTokens,
  ) +
  c.networkCostMs +
  (c.adapterCostMs?.(r.model) ?? 0);

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
    return predictedMs + weight * unloadedTtft(c) * (c.running + queued) + recomputeCost(c, predictedMs, among);
  };
}

/**
 * The wait a pod's recomputing of a prefix another candidate holds adds for the requests behind
 * it. The prediction prices this request's own TTFT only; but tokens prefilled again are work
 * nobody needed, and every request that reaches the pod before this one's first token waits for
 * them, once each. The tokens a pod would recompute beyond the best holder are priced at the
 * pod's own per-token cost times those requests (requestsBehind): nothing on a pod nobody is
 * sent to and nobody waits at, or when no candidate holds more of the prompt (no prefix sharing:
 * every decision as before). Under overload it keeps conversations on the pods holding their
 * history; sent to the shortest prediction, their histories' prefill fed the overload
 * (bench:routing-prefix, multi-turn at 160 %: seeds 5–9 p90 366 → 287 ms counting the queue
 * alone, seeds 0–9 216 → 193 ms with the arrivals).
 */
function recomputeCost(c: Candidate, predictedMs: number, among: Among): number {
  const recomputed = among.mostCachedTokens - (c.expectedCachedTokens ?? 0);
  if (recomputed <= 0) return 0;
  const behind = requestsBehind(c, predictedMs);
  return behind > 0 ? ((c.params.perKPromptTokens * recomputed) / 1000) * behind : 0;
}

/**
 * How many requests will reach the pod while this one awaits its first token there: its recent
 * arrival rate (this agent's sends) times the predicted TTFT; or, when more stand ahead now, as
 * many as stand ahead (in a queue that neither grows nor shrinks, as many join behind a request
 * as it found ahead). Ahead: those queued (and sent but unseen), or this agent's own still
 * without a first token, whichever is more (chunked prefill admits requests to the batch before
 * their prefill is done, and the pod counts them as running). The queue alone missed the full
 * batch: at 160 % a pod running 16 with nothing waiting still made every newcomer wait ~1.5 s,
 * and a 2,500-token history sent there was priced at nothing (seed 7,021).
 */
function requestsBehind(c: Candidate, predictedMs: number): number {
  const ahead = Math.max(c.queuedNow + c.unseenSent, c.pendingRequests ?? 0);
  return Math.max(ahead, (c.sentPerMs ?? 0) * predictedMs);
}
