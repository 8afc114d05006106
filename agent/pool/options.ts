// The pool's settings, apart from the pool so each of its parts can name the few it needs.
import type { PredictorOptions } from '../predict/predictor.ts';
import type { EjectionOptions } from './ejection.ts';
import type { LoraCosts } from '../route/lora.ts';

export interface PoolOptions {
  node: string;
  scrapeIntervalMs: number;
  /**
   * The scraper's timeout: how long a local pod's scrape in flight may take before its lateness
   * counts against it (staleness, `staleAfterMs`). Absent: 0, stale after two intervals.
   */
  scrapeTimeoutMs?: number;
  /** Gossiped estimates older than this are stale (the origin's TTL covers silent origins). */
  peerMaxAgeMs: number;
  networkCostMs: number;
  /** The window gossiped as a pod's `queued` (and used for peers' exclusion rules). */
  referenceWindowMs: number;
  /** A pod unreachable before a request's first byte is ejected (agent/pool/ejection.ts). */
  ejection?: Partial<EjectionOptions>;
  /** A pod that answered a request with an error (429, 5xx) sits out this long (default 1 s). */
  answerCooldownMs?: number;
  /** Requests this agent has at one pod at once (= connections); past it the pod is at capacity. */
  maxInFlightPerPod?: number;
  now: () => number;
  predictor?: Partial<PredictorOptions>;
  /**
   * Peers' pods a decision looks at, per model: the ones predicted fastest when gossip last
   * changed them (default 32). Keeps a decision's cost flat however many pods the cluster has.
   */
  peerShortlist?: number;
  /** Bound of the prefix index: prompt blocks remembered per local pod. */
  prefixBlocksPerPod?: number;
  /** What loading a LoRA adapter, or waiting for a slot, adds to a pod's TTFT (default DEFAULT_LORA_COSTS). */
  loraCosts?: LoraCosts;
  /**
   * Share of a local pod's batch (as far as seen: Learner.batchLimit) that a request which may
   * leave does not take: it is priced as if that many more were running, so past that point it
   * meets the full batch's margin. Requests that cannot leave have nowhere else to go; without a
   * reserve, leavable ones admitted to every free slot made them queue (default 0.375: 2 of 4
   * slots, 3 of 8; compared with 0.25 on bench:peak's 4- and 8-slot shapes, where 0.25 cost
   * must-stay requests 4–7 points of attainment at 1.5×).
   */
  leavableBatchReserve?: number;
}

/** Default for `PoolOptions.leavableBatchReserve`. */
export const DEFAULT_LEAVABLE_BATCH_RESERVE = 0.375;

/** Default for `PoolOptions.peerShortlist`. */
export const DEFAULT_PEER_SHORTLIST = 32;
