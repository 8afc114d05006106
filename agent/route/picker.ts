// Pickers: choose among scored candidates. Randomness is injected.
import type { Candidate } from './candidate.ts';

export interface Scored {
  candidate: Candidate;
  /** Predicted TTFT (ms) including network cost. */
  predictedMs: number;
  /** Its q-quantile (q = the policy's attainment), network cost included. */
  quantileMs: number;
  /** The strategy's score: lower is better (Kinference's: the prediction plus the load term, score.ts). */
  score: number;
}

export type Picker = (scored: readonly Scored[], rand: () => number) => Scored | undefined;

export interface NearTieOptions {
  /** Candidates within this many ms of the best … */
  absoluteMs: number;
  /** … or within this fraction of the best score are near-ties. */
  fraction: number;
}

/**
 * The fastest, chosen at random among near-ties so concurrent decisions made on the same stale
 * view don't herd onto one pod. Peer scores already carry the network cost.
 */
export function fastestAmongNearTies(options: NearTieOptions): Picker {
  return (scored, rand) => {
    if (scored.length === 0) return undefined;
    let best = scored[0];
    for (const s of scored) if (s.score < best.score) best = s;
    const limit = best.score + Math.max(options.absoluteMs, best.score * options.fraction);
    const ties = scored.filter((s) => s.score <= limit);
    // Among near-ties a local pod wins: same expected latency, no cross-node hop to go wrong.
    const localTies = ties.filter((s) => s.candidate.where === 'local');
    const pool = mostCached(localTies.length > 0 ? localTies : ties);
    return pool[Math.min(pool.length - 1, Math.floor(rand() * pool.length))];
  };
}

/**
 * Of near-ties, those expected to hold the longest prefix of the prompt. The prediction cannot tell
 * near-ties apart, but the prefill a cached prefix saves is work the pod does not do for anyone,
 * and choosing at random among busy pods with near-equal scores sends conversations away from
 * their caches: under overload every score is large, 5 % of it exceeds any prefill saved, and the
 * misses' extra prefill fed the overload (bench:routing-prefix, multi-turn at 1.6× load: p90
 * 9.4 s → 0.2 s). Herding is no risk here: a prefix belongs to one conversation or application.
 */
function mostCached(ties: readonly Scored[]): readonly Scored[] {
  let most = 0;
  for (const s of ties) most = Math.max(most, s.candidate.expectedCachedTokens ?? 0);
  return most === 0 ? ties : ties.filter((s) => (s.candidate.expectedCachedTokens ?? 0) === most);
}
