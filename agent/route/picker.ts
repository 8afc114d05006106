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
    // Among near-ties a local pod wins: same expected latency, no cross-node hop to go wrong.
    // Counted, then walked, in score order: the same choice as filtering the lists out, with no
    // list made per request.
    let ties = 0;
    let localTies = 0;
    for (const s of scored) {
      if (!(s.score <= limit)) continue;
      ties++;
      if (s.candidate.where === 'local') localTies++;
    }
    const localOnly = localTies > 0;
    const most = mostCached(scored, limit, localOnly);
    let size = 0;
    for (const s of scored) if (inPool(s, limit, localOnly, most)) size++;
    let index = Math.min(size - 1, Math.floor(rand() * size));
    if (ties === 0 || index < 0) return undefined;
    for (const s of scored) if (inPool(s, limit, localOnly, most) && index-- === 0) return s;
    return undefined;
  };
}

/**
 * Of near-ties, those expected to hold the longest prefix of the prompt. The prediction cannot tell
 * near-ties apart, but the prefill a cached prefix saves is work the pod does not do for anyone,
 * and choosing at random among busy pods with near-equal scores sends conversations away from
 * their caches: under overload every score is large, 5 % of it exceeds any prefill saved, and the
 * misses' extra prefill fed the overload (bench:routing-prefix, multi-turn at 1.6× load: p90
 * 9.4 s → 0.2 s). Herding is no risk here: a prefix belongs to one conversation or application.
 * Returns the most cached tokens among the near-ties (local ones when `localOnly`); 0: none cached.
 */
function mostCached(scored: readonly Scored[], limit: number, localOnly: boolean): number {
  let most = 0;
  for (const s of scored) {
    if (s.score <= limit && (!localOnly || s.candidate.where === 'local'))
      most = Math.max(most, s.candidate.expectedCachedTokens ?? 0);
  }
  return most;
}

/** Whether `s` is among those the picker chooses from at random. */
function inPool(s: Scored, limit: number, localOnly: boolean, most: number): boolean {
  return (
    s.score <= limit &&
    (!localOnly || s.candidate.where === 'local') &&
    (most === 0 || (s.candidate.expectedCachedTokens ?? 0) === most)
  );
}
