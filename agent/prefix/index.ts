// The agent's approximate prefix index: which prompt blocks each pod probably still has cached.
// Pure (no I/O, no clock): the request path records what it sent where, the scrape path tells it
// what each pod can still hold, and the router asks how many of a prompt's tokens a pod has cached.
//
// Two views of the same entries:
//   - per pod, an LRU (lru-cache, bounded by `maxBlocksPerPod`) of block hash → the pod's write
//     counter when recorded; it bounds memory and drops what was recorded longest ago;
//   - one map block hash → the pods holding it, so a lookup over many candidates touches only
//     the pods holding the prompt's first block (as llm-d's indexer does), not every candidate.
// A pod's live blocks of one prompt always form a prefix: `record` writes a prompt's last block
// first, so its earlier blocks are more recent in the LRU and carry a stamp at least as new. So
// one pod's longest cached prefix is found by binary search, ~log2(blocks) probes; over many
// pods, by where the number of holders drops along the prompt (cachedTokensByPod).
//
// Ageing, on the pod's KV capacity (its metrics say how many blocks it holds): the engine keeps
// blocks until it needs room and then evicts the least recently used. So an entry is still expected
// cached while (a) it is among the pod's most recently sent blocks that fit its capacity (the index's
// own LRU is trimmed to it), and (b) the blocks the pod has computed since it was recorded (its
// prompt tokens computed, vLLM's prefix_cache_queries − prefix_cache_hits, over the block size:
// everyone's traffic, not only this agent's) fit in that capacity. Not the free part of it only:
// under pressure the KV is mostly held by running requests, and those hold exactly the hot
// prefixes; ageing by free KV called them evicted and the index went blind when it mattered most
// (docs/prefix-routing.md, "Under cache pressure"). A counter that goes back means the server
// restarted: all is gone. A prompt is recorded when sent and again when its request ends well: the
// engine holds its blocks while it runs and frees them into its LRU at its end, so that is when
// they start to age (a request queued and decoded for seconds under load was aged from its send,
// and the index lost hot contexts the pod still had).

import { LRUCache } from 'lru-cache';
import { BLOCK_TOKENS } from './blocks.ts';

/**
 * The index holds only this agent's own pods (peers' pods get no prefix estimate), a handful per
 * node, at ~190 bytes a block (bench/prefix.bench.ts): 32,768 blocks is ~6 MB a pod, and more
 * than a sim pod's whole KV cache (4,096 blocks); on a larger pod the oldest records go first.
 */
export const DEFAULT_MAX_BLOCKS_PER_POD = 32_768;

export interface PrefixIndexOptions {
  /** Most blocks remembered per pod (default 32,768 ≈ 524k tokens at 16 tokens a block, ~6 MB). */
  maxBlocksPerPod?: number;
  /** Tokens per block; the block hashes must have been made with the same size. */
  blockTokens?: number;
}

/** What the pod's last scrape says about its cache; all cumulative counters as scraped. */
export interface PodCacheState {
  /** KV-cache capacity in blocks of `blockTokens` (vLLM: num_gpu_blocks × block_size / blockTokens). */
  capacityBlocks: number;
  /** Prompt tokens the pod computed itself so far: prefix-cache queries − hits, or prompt tokens without them. */
  computedTokens: number;
}

export interface PrefixIndexMemory {
  pods: number;
  /** Entries over all pods. */
  blocks: number;
  /** Distinct block hashes across pods. */
  distinctBlocks: number;
}

interface PodState {
  readonly id: string;
  readonly blocks: LRUCache<number, number>;
  /** Blocks the pod has computed, from its counters: the clock entries are aged by. */
  written: number;
  /** Blocks the pod's KV cache holds; Infinity until its first scrape. */
  capacityBlocks: number;
  computedTokens: number;
  /** The last holder set cachedTokensByPod found this pod in (its marker). */
  seen: number;
}

export class PrefixIndex {
  readonly maxBlocksPerPod: number;
  readonly blockTokens: number;
  readonly #pods = new Map<string, PodState>();
  /** Block hash → the pods holding it (usually one or two: an array is smaller than a Set). */
  readonly #holders = new Map<number, PodState[]>();
  /** Numbers the holder sets cachedTokensByPod marks, so no marker needs clearing. */
  #marks = 0;

  constructor(opts: PrefixIndexOptions = {}) {
    this.maxBlocksPerPod = positiveInt(opts.maxBlocksPerPod ?? DEFAULT_MAX_BLOCKS_PER_POD, 'maxBlocksPerPod');
    this.blockTokens = positiveInt(opts.blockTokens ?? BLOCK_TOKENS, 'blockTokens');
  }

  /** `blocks` (a prompt's chained hashes, in order) were just sent to `podId`. */
  record(podId: string, blocks: readonly number[]): void {
    if (blocks.length === 0) return;
    const pod = this.#pod(podId);
    // Last block first, so the prompt's first blocks are the most recent and evicted last:
    // the chain stays matchable from its start, as on the server.
    for (let i = blocks.length - 1; i >= 0; i--) {
      const hash = blocks[i];
      if (!pod.blocks.has(hash)) this.#addHolder(hash, pod);
      pod.blocks.set(hash, pod.written);
    }
    this.#trim(pod);
  }

  /** Tokens of the prompt whose `blocks` `podId` is expected to have cached: its leading live blocks. */
  expectedCachedTokens(podId: string, blocks: readonly number[]): number {
    const pod = this.#pods.get(podId);
    return pod ? this.#livePrefix(pod, blocks) * this.blockTokens : 0;
  }

  /**
   * Expected cached tokens for every pod holding at least the prompt's first block (absent = 0).
   * The pods holding block i include those holding block i + 1 (each pod's blocks of a chain form
   * a prefix), so the holder count only falls along the prompt. Each stretch of equal count is
   * found by binary search on the shared block → pods map, the pods that drop out at its end have
   * recorded exactly that many blocks, and one probe of each pod's own entry says whether its whole
   * record is still live (earlier blocks are never older): a hundred pods sharing a system prompt
   * cost a hundred probes, not a binary search each.
   */
  cachedTokensByPod(blocks: readonly number[]): Map<string, number> {
    const result = new Map<string, number>();
    let current = blocks.length > 0 ? this.#holders.get(blocks[0]) : undefined;
    if (!current) return result;
    const count = (i: number) => this.#holders.get(blocks[i])?.length ?? 0;
    let start = 0;
    while (current.length > 0) {
      let lo = start;
      let hi = blocks.length - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >>> 1;
        if (count(mid) >= current.length) lo = mid;
        else hi = mid - 1;
      }
      const end = lo + 1;
      const next = end < blocks.length ? (this.#holders.get(blocks[end]) ?? []) : [];
      const mark = ++this.#marks;
      for (const pod of next) pod.seen = mark;
      for (const pod of current) {
        if (pod.seen === mark) continue;
        const n = this.#alive(pod, blocks[end - 1]) ? end : this.#livePrefix(pod, blocks, end - 1);
        if (n > 0) result.set(pod.id, n * this.blockTokens);
      }
      current = next;
      start = end;
    }
    return result;
  }

  /** Ages `podId`'s entries by what its last scrape says it computed and can hold. */
  observe(podId: string, state: PodCacheState): void {
    // Known from its first scrape on, so the tokens it computed before we sent it anything
    // set the baseline instead of ageing our first records.
    const pod = this.#pod(podId);
    if (state.computedTokens < pod.computedTokens) {
      // The counters went back: a restarted server has an empty cache.
      pod.blocks.clear();
      pod.written = 0;
    } else {
      pod.written += (state.computedTokens - pod.computedTokens) / this.blockTokens;
    }
    pod.computedTokens = state.computedTokens;
    pod.capacityBlocks = Math.max(0, Math.floor(state.capacityBlocks));
    this.#trim(pod);
  }

  /** Drops everything about `podId` (it left, or restarted). */
  forget(podId: string): void {
    const pod = this.#pods.get(podId);
    if (!pod) return;
    pod.blocks.clear();
    this.#pods.delete(podId);
  }

  /** Blocks remembered for `podId`. */
  podBlocks(podId: string): number {
    return this.#pods.get(podId)?.blocks.size ?? 0;
  }

  memory(): PrefixIndexMemory {
    let blocks = 0;
    for (const pod of this.#pods.values()) blocks += pod.blocks.size;
    return { pods: this.#pods.size, blocks, distinctBlocks: this.#holders.size };
  }

  /** How many leading `blocks` `pod` still holds: binary search, relying on the prefix property. */
  #livePrefix(pod: PodState, blocks: readonly number[], limit = blocks.length): number {
    if (limit === 0 || !this.#alive(pod, blocks[0])) return 0;
    let lo = 1; // known live
    let hi = limit; // upper bound
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (this.#alive(pod, blocks[mid - 1])) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  #alive(pod: PodState, hash: number): boolean {
    const stamp = pod.blocks.peek(hash);
    return stamp !== undefined && pod.written - stamp <= pod.capacityBlocks;
  }

  /** Drops the least recently sent entries the pod's KV cache could not hold alongside the rest. */
  #trim(pod: PodState): void {
    while (pod.blocks.size > pod.capacityBlocks) pod.blocks.pop();
  }

  #pod(podId: string): PodState {
    let pod = this.#pods.get(podId);
    if (!pod) {
      const state: PodState = {
        id: podId,
        // maxSize rather than max: lru-cache preallocates `max` slots up front, which would cost
        // every pod the full bound even when it holds a handful of blocks.
        blocks: new LRUCache<number, number>({
          maxSize: this.maxBlocksPerPod,
          sizeCalculation: () => 1,
          dispose: (_stamp, hash, reason) => {
            if (reason !== 'set') this.#removeHolder(hash, state);
          },
        }),
        written: 0,
        capacityBlocks: Infinity,
        computedTokens: 0,
        seen: 0,
      };
      pod = state;
      this.#pods.set(podId, pod);
    }
    return pod;
  }

  #addHolder(hash: number, pod: PodState): void {
    const holders = this.#holders.get(hash);
    if (holders) holders.push(pod);
    else this.#holders.set(hash, [pod]);
  }

  #removeHolder(hash: number, pod: PodState): void {
    const holders = this.#holders.get(hash);
    if (!holders) return;
    const i = holders.indexOf(pod);
    if (i >= 0) holders.splice(i, 1);
    if (holders.length === 0) this.#holders.delete(hash);
  }
}

function positiveInt(n: number, name: string): number {
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`${name} must be a positive integer`);
  return n;
}
