// The routing decision for one request: a pure function of candidates, policy and request.
// Filters drop candidates with a reason; the strategy predicts each one's TTFT, scores the rest and
// picks; with no
// candidate left the policy decides between overflow, a bounded wait, and rejection.
import type { EffectivePolicy, RouteRequest } from '../types.ts';
import type { Candidate } from './candidate.ts';
import { DEFAULT_FILTERS, firstDrop, type Drop, type DropReason, type Filter, type FilterContext } from './filters.ts';
import { fastestAmongNearTies, type Picker, type Scored } from './picker.ts';
import { predictedTtft, predictionPlusLoad, type Among, type Predict, type Score } from './score.ts';

/**
 * A routing strategy is data, in the field's order: predict each candidate's TTFT, drop those a
 * filter refuses, score the rest, pick one. The bench's baselines are strategies too
 * (strategies.ts), so every one of them is judged by the same router and explained the same way.
 */
export interface Strategy {
  /** Predicted TTFT (ms) of this request at the candidate: the SLO filter and explain use it. */
  predict: Predict;
  filters: readonly Filter[];
  /** Ranks the candidates that passed, from the prediction: lower is better. */
  score: Score;
  pick: Picker;
}

export const KINFERENCE_STRATEGY: Strategy = {
  predict: predictedTtft,
  filters: DEFAULT_FILTERS,
  score: predictionPlusLoad(0.3),
  pick: fastestAmongNearTies({ absoluteMs: 5, fraction: 0.05 }),
};

/** Whether this request's data may leave the cluster, and through which providers. */
export interface LeaveVerdict {
  allowed: boolean;
  reason: string;
  /** Providers in policy order that can serve this model now (breaker closed). */
  providers: readonly string[];
  /**
   * Set when leaving is allowed and providers serve the model, but every one's circuit breaker
   * is open: ms until the first lets a request through again.
   */
  breakersOpenMs?: number;
  /** Set when the tenant's overflow budget is what keeps the request in the cluster (not allowed). */
  budget?: { scope: string; reason: string; retryAfterMs: number; message: string };
}

export interface DroppedCandidate extends Drop {
  pod: string;
  where: 'local' | 'peer';
  predictedMs: number;
  quantileMs: number;
}

export type Decision =
  | ({ action: 'pod'; chosen: Scored; predictedTtftMs: number } & DecisionBasis)
  | ({ action: 'overflow'; providers: readonly string[] } & DecisionBasis)
  | ({ action: 'wait'; maxWaitMs: number } & DecisionBasis)
  | ({ action: 'reject'; status: 429 | 503; message: string; retryAfterMs?: number } & DecisionBasis);

export interface DecisionBasis {
  policy: string;
  leave: LeaveVerdict;
  /** Candidates that passed every filter, best first. */
  scored: Scored[];
  dropped: DroppedCandidate[];
}

/** `peer/<node>/<pod>` or `local/<pod>`: the name people see in headers and explain. */
export function candidateName(c: Candidate): string {
  return c.where === 'local' ? `local/${c.pod.name}` : `peer/${c.pod.node}/${c.pod.name}`;
}

/**
 * A dropped candidate whose name and detail are written when read: every request counts its
 * drops by reason (metrics), only explain and logs read the words.
 */
class Dropped implements DroppedCandidate {
  readonly reason: DropReason;
  readonly where: 'local' | 'peer';
  readonly predictedMs: number;
  readonly quantileMs: number;
  readonly #drop: Drop;
  readonly #candidate: Candidate;
  #pod: string | undefined;

  constructor(drop: Drop, candidate: Candidate, predictedMs: number, quantileMs: number) {
    this.reason = drop.reason;
    this.where = candidate.where;
    this.predictedMs = predictedMs;
    this.quantileMs = quantileMs;
    this.#drop = drop;
    this.#candidate = candidate;
  }

  get detail(): string {
    return this.#drop.detail;
  }

  get pod(): string {
    return (this.#pod ??= candidateName(this.#candidate));
  }

  /** Read like the plain object it stands for (JSON.stringify skips getters). */
  toJSON(): DroppedCandidate {
    const { reason, detail, pod, where, predictedMs, quantileMs } = this;
    return { reason, detail, pod, where, predictedMs, quantileMs };
  }
}

/** A q-quantile of a predicted TTFT: the pod's part times `factor` (exp of the candidate's log
 *  margin for q, its calibration), the network's as is. */
function scaledByMargin(c: Candidate, predictedMs: number, factor: number): number {
  const podMs = predictedMs - c.networkCostMs;
  return c.networkCostMs + podMs * factor;
}

export interface DecideInput {
  request: RouteRequest;
  policy: EffectivePolicy;
  candidates: readonly Candidate[];
  leave: LeaveVerdict;
  /** The request already waited this long (ms); a wait decision only covers what is left. */
  waitedMs?: number;
  rand: () => number;
  strategy?: Strategy;
  /**
   * The quantile a request that may leave is admitted on (agent/admission/threshold.ts steers it
   * toward the policy's attainment target); absent: the policy's attainment itself.
   */
  admissionQuantile?: number;
}

/** Lower score first; -1/0/1 rather than a difference, which V8 would box as a heap number per comparison. */
const byScore = (a: Scored, b: Scored): number => (a.score < b.score ? -1 : a.score > b.score ? 1 : 0);

/** Above this many, Array.prototype.sort; below, an insertion sort in place. */
const INSERTION_SORT_MAX = 64;

/**
 * Sorts by score, stably, as `scored.sort(byScore)` does. A decision sorts a few dozen entries,
 * and V8's sort copies them into a work array first (≈ 1 KB per decision for the GC); a stable
 * insertion sort in place gives the same order for any total order. A NaN score makes the
 * comparator no order at all, and then the built-in sort decides, as before.
 */
function sortByScore(scored: Scored[]): void {
  const n = scored.length;
  if (n > INSERTION_SORT_MAX) {
    scored.sort(byScore);
    return;
  }
  for (let i = 0; i < n; i++) {
    if (Number.isNaN(scored[i].score)) {
      scored.sort(byScore);
      return;
    }
  }
  for (let i = 1; i < n; i++) {
    const x = scored[i];
    let j = i - 1;
    while (j >= 0 && scored[j].score > x.score) {
      scored[j + 1] = scored[j];
      j--;
    }
    scored[j + 1] = x;
  }
}

export function decide(input: DecideInput): Decision {
  const { request, policy, candidates, leave, rand } = input;
  const strategy = input.strategy ?? KINFERENCE_STRATEGY;
  // Sized once and cut to length at the end: growing it by push copies it ~3 times per decision.
  const scored: Scored[] = new Array<Scored>(candidates.length);
  let passed = 0;
  const dropped: DroppedCandidate[] = [];
  let servesModel = 0;

  const mayLeave = leave.allowed && leave.providers.length > 0;
  // One context for every filter call, its numbers set per candidate: filters only read it, and a
  // decision over dozens of candidates should not leave hundreds of objects for the GC.
  const quantile = input.admissionQuantile ?? policy.sloAttainment;
  const context: FilterContext = { request, policy, predictedMs: 0, quantileMs: 0, quantile, mayLeave };
  // The longest prefix any candidate holds: a pod that would prefill it again pays for that (score.ts).
  let mostCachedTokens = 0;
  for (const c of candidates) mostCachedTokens = Math.max(mostCachedTokens, c.expectedCachedTokens ?? 0);
  const among: Among = { mostCachedTokens };
  // The last margin's exp is kept: peers' pods share the node's margin (one per regime), so most
  // candidates repeat the one before, and exp is the dearest step of the quantile.
  let lastMargin = NaN;
  let lastFactor = NaN;
  for (const candidate of candidates) {
    const predictedMs = strategy.predict(candidate, request);
    let quantileMs = predictedMs;
    if (candidate.logMargin) {
      const margin = candidate.logMargin(quantile);
      if (margin !== lastMargin) lastFactor = Math.exp((lastMargin = margin));
      quantileMs = scaledByMargin(candidate, predictedMs, lastFactor);
    }
    context.predictedMs = predictedMs;
    context.quantileMs = quantileMs;
    const drop = firstDrop(strategy.filters, candidate, context);
    if (drop?.reason !== 'model-not-served') servesModel++;
    if (drop) {
      // Pods of other models are noise in explain output; keep only those that could have served.
      if (drop.reason !== 'model-not-served') {
        dropped.push(new Dropped(drop, candidate, predictedMs, quantileMs));
      }
      continue;
    }
    scored[passed++] = {
      candidate,
      predictedMs,
      quantileMs,
      score: strategy.score(candidate, predictedMs, request, among),
    };
  }
  scored.length = passed;
  sortByScore(scored);
  const chosen = strategy.pick(scored, rand);
  // Written out rather than spread from `basis`: the common answer, built once per request.
  if (chosen)
    return { action: 'pod', chosen, predictedTtftMs: chosen.predictedMs, policy: policy.name, leave, scored, dropped };
  const basis: DecisionBasis = { policy: policy.name, leave, scored, dropped };

  if (leave.allowed && leave.providers.length > 0) return { action: 'overflow', providers: leave.providers, ...basis };

  // Unknown models are answered 404 by the ingress before routing; here the model exists
  // somewhere (a pod elsewhere, a provider), just nowhere this request may go.
  if (servesModel === 0) {
    return {
      action: 'reject',
      status: 503,
      message: `no pod serves model ${request.model} and ${leave.reason}`,
      ...basis,
    };
  }

  const left = policy.waitMaxMs - (input.waitedMs ?? 0);
  if (left > 0) return { action: 'wait', maxWaitMs: left, ...basis };
  if (leave.allowed && leave.breakersOpenMs !== undefined) {
    // It would have overflowed: nothing is at fault but the providers, and they say when to retry.
    return {
      action: 'reject',
      status: 503,
      message: `no pod can answer model ${request.model} within the SLO (${policy.sloTtftMs}ms) and every overflow provider's circuit breaker is open (next trial in ${Math.ceil(leave.breakersOpenMs / 1000)}s)`,
      retryAfterMs: leave.breakersOpenMs,
      ...basis,
    };
  }
  return {
    action: 'reject',
    status: 429,
    message: `no pod can answer model ${request.model} within the SLO (${policy.sloTtftMs}ms) and ${leave.reason}`,
    ...basis,
  };
}
