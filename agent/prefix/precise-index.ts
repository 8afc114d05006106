// The precise prefix index: which blocks each local pod's engine says it holds, from its own
// KV-cache events. Pure (no sockets, no clock): the subscriber shell applies each pod's batches in
// order (agent/prefix/kv-stream.ts decides the order), and the router asks how many of a prompt's
// tokens each pod holds.
//
// Per pod: engine hash → the token-exact key of that block (agent/prefix/token-blocks.ts), which a
// BlockStored's token ids and parent give, and a BlockRemoved takes away; one map key → the pods
// holding it serves a lookup over every pod at once. A pod's entries are capped by its KV capacity
// in blocks (what the engine can hold at most): when removals were lost, the oldest stored go first,
// so memory stays bounded by the pod's size whatever the stream does. Only device blocks count
// ("GPU", or unnamed); offload tiers are a slower hit the router does not model yet.

import type { EngineBlockHash, KvBatch } from './kv-events.ts';
import { buildSummary, isSampled, SUMMARY_KEYS } from './summary.ts';
import { blockKey, chainRoot, tokenBlockKeys, type BlockKey } from './token-blocks.ts';

/** Default entries per pod before its capacity is known: 65,536 blocks = 1M tokens at 16 a block. */
export const DEFAULT_PRECISE_MAX_BLOCKS = 65_536;

export interface PreciseIndexOptions {
  /** Most blocks remembered per pod when its KV capacity is not known (or larger than this). */
  maxBlocksPerPod?: number;
}

export interface PreciseApplyResult {
  stored: number;
  removed: number;
  /** Stored blocks whose parent the index does not know (a lost batch): unreachable, skipped. */
  orphaned: number;
  /** Blocks dropped because the pod's cap was reached (removals were lost, or the cap is low). */
  capped: number;
  /** Events of another medium or KV group, ignored. */
  ignored: number;
}

interface PodBlocks {
  readonly id: string;
  /** Engine hash → key, in the order stored (the oldest first: what the cap drops first). */
  readonly byHash: Map<EngineBlockHash, BlockKey>;
  /** Key → how many of this pod's engine hashes name it (an engine may hold a block twice). */
  readonly keys: Map<BlockKey, number>;
  /** Its sampled keys (summary.ts), least recently stored first: what it gossips. */
  readonly sampled: Set<BlockKey>;
  /** The engine's block size, from its events. */
  blockSize: number;
  /** Most entries kept: its KV capacity in blocks, capped by the index's bound. */
  cap: number;
}

export class PreciseIndex {
  readonly maxBlocksPerPod: number;
  readonly #pods = new Map<string, PodBlocks>();
  /** Key → the pods holding it (usually one or two). */
  readonly #holders = new Map<BlockKey, PodBlocks[]>();

  constructor(opts: PreciseIndexOptions = {}) {
    const max = opts.maxBlocksPerPod ?? DEFAULT_PRECISE_MAX_BLOCKS;
    if (!Number.isInteger(max) || max < 1) throw new RangeError('maxBlocksPerPod must be a positive integer');
    this.maxBlocksPerPod = max;
  }

  /** The pod's KV capacity in its own blocks (from its metrics): its entries never exceed it. */
  setCapacity(podId: string, capacityBlocks: number): void {
    const pod = this.#pod(podId);
    pod.cap = Math.max(1, Math.min(this.maxBlocksPerPod, Math.floor(capacityBlocks) || this.maxBlocksPerPod));
    this.#trim(pod);
  }

  /** Applies one batch of `podId`'s events, in order. */
  apply(podId: string, batch: KvBatch): PreciseApplyResult {
    const pod = this.#pod(podId);
    const result: PreciseApplyResult = { stored: 0, removed: 0, orphaned: 0, capped: 0, ignored: 0 };
    for (const event of batch.events) {
      if (event.type === 'cleared') {
        this.clear(podId);
        continue;
      }
      if (!countsAsDevice(event.medium, event.group)) {
        result.ignored += event.hashes.length;
        continue;
      }
      if (event.type === 'removed') {
        for (const hash of event.hashes) if (this.#remove(pod, hash)) result.removed++;
        continue;
      }
      pod.blockSize = event.blockSize;
      let parent: BlockKey | undefined =
        event.parent === undefined ? chainRoot(event.lora) : pod.byHash.get(event.parent);
      if (parent === undefined) {
        result.orphaned += event.hashes.length;
        continue;
      }
      for (let i = 0; i < event.hashes.length; i++) {
        const key: BlockKey = blockKey(parent, event.tokenIds, i * event.blockSize, event.blockSize);
        this.#add(pod, event.hashes[i], key);
        parent = key;
        result.stored++;
      }
      result.capped += this.#trim(pod);
    }
    return result;
  }

  /** Forgets every block of `podId` (AllBlocksCleared, a resync, a restart) but keeps its settings. */
  clear(podId: string): void {
    const pod = this.#pods.get(podId);
    if (!pod) return;
    for (const key of pod.keys.keys()) this.#removeHolder(key, pod);
    pod.byHash.clear();
    pod.keys.clear();
    pod.sampled.clear();
  }

  /** Drops `podId` altogether (it left). */
  forget(podId: string): void {
    this.clear(podId);
    this.#pods.delete(podId);
  }

  /** Whether the index has heard of `podId` (it has a stream, even an empty one). */
  knows(podId: string): boolean {
    return this.#pods.has(podId);
  }

  /** `podId`'s engine block size (16 until its first BlockStored says otherwise). */
  blockSize(podId: string): number {
    return this.#pods.get(podId)?.blockSize ?? 16;
  }

  podBlocks(podId: string): number {
    return this.#pods.get(podId)?.byHash.size ?? 0;
  }

  /**
   * Tokens of the prompt `tokens` each pod holds as a cached prefix (pods holding none are absent).
   * Keys are computed once per block size among the pods (one, normally) and `lora` (the adapter the
   * request runs under, undefined for the base model); `maxBlocks` bounds the work on a huge prompt.
   */
  cachedTokensByPod(tokens: ArrayLike<number>, lora?: string, maxBlocks = Infinity): Map<string, number> {
    const result = new Map<string, number>();
    const keysBySize = new Map<number, BlockKey[]>();
    for (const pod of this.#pods.values()) {
      if (pod.keys.size === 0) continue;
      let keys = keysBySize.get(pod.blockSize);
      if (!keys) {
        keys = tokenBlockKeys(tokens, pod.blockSize, lora, maxBlocks);
        keysBySize.set(pod.blockSize, keys);
      }
      if (keys.length === 0 || !pod.keys.has(keys[0])) continue;
      // Each pod's blocks of a chain form a prefix in practice (a block's parent is evicted after it),
      // but a lost removal can leave a hole: walk, do not bisect.
      let n = 1;
      while (n < keys.length && pod.keys.has(keys[n])) n++;
      result.set(pod.id, n * pod.blockSize);
    }
    return result;
  }

  /** The gossiped summary of `podId`'s hottest prefixes (summary.ts); undefined when it holds none. */
  summary(podId: string): Uint8Array | undefined {
    const pod = this.#pods.get(podId);
    if (!pod || pod.sampled.size === 0) return undefined;
    const keys = [...pod.sampled];
    return buildSummary(keys.slice(Math.max(0, keys.length - SUMMARY_KEYS)));
  }

  memory(): { pods: number; blocks: number; distinctKeys: number } {
    let blocks = 0;
    for (const pod of this.#pods.values()) blocks += pod.byHash.size;
    return { pods: this.#pods.size, blocks, distinctKeys: this.#holders.size };
  }

  #add(pod: PodBlocks, hash: EngineBlockHash, key: BlockKey): void {
    const previous = pod.byHash.get(hash);
    if (previous !== undefined) {
      if (previous === key) {
        // Stored again: move it to the newest end, so the cap drops it last.
        pod.byHash.delete(hash);
        pod.byHash.set(hash, key);
        this.#touchSampled(pod, key);
        return;
      }
      this.#remove(pod, hash);
    }
    pod.byHash.set(hash, key);
    const refs = pod.keys.get(key) ?? 0;
    pod.keys.set(key, refs + 1);
    this.#touchSampled(pod, key);
    if (refs === 0) {
      const holders = this.#holders.get(key);
      if (holders) holders.push(pod);
      else this.#holders.set(key, [pod]);
    }
  }

  #remove(pod: PodBlocks, hash: EngineBlockHash): boolean {
    const key = pod.byHash.get(hash);
    if (key === undefined) return false;
    pod.byHash.delete(hash);
    const refs = pod.keys.get(key) ?? 0;
    if (refs > 1) pod.keys.set(key, refs - 1);
    else {
      pod.keys.delete(key);
      pod.sampled.delete(key);
      this.#removeHolder(key, pod);
    }
    return true;
  }

  #touchSampled(pod: PodBlocks, key: BlockKey): void {
    if (!isSampled(key)) return;
    pod.sampled.delete(key);
    pod.sampled.add(key);
  }

  /** Drops the oldest entries past the pod's cap; returns how many. */
  #trim(pod: PodBlocks): number {
    let dropped = 0;
    while (pod.byHash.size > pod.cap) {
      const oldest = pod.byHash.keys().next().value as EngineBlockHash;
      this.#remove(pod, oldest);
      dropped++;
    }
    return dropped;
  }

  #removeHolder(key: BlockKey, pod: PodBlocks): void {
    const holders = this.#holders.get(key);
    if (!holders) return;
    const i = holders.indexOf(pod);
    if (i >= 0) holders.splice(i, 1);
    if (holders.length === 0) this.#holders.delete(key);
  }

  #pod(podId: string): PodBlocks {
    let pod = this.#pods.get(podId);
    if (!pod) {
      pod = {
        id: podId,
        byHash: new Map(),
        keys: new Map(),
        sampled: new Set(),
        blockSize: 16,
        cap: this.maxBlocksPerPod,
      };
      this.#pods.set(podId, pod);
    }
    return pod;
  }
}

/** Device blocks of the main KV group: what makes the next prefill shorter. */
function countsAsDevice(medium: string | undefined, group: number | undefined): boolean {
  return (medium === undefined || medium === 'GPU') && (group === undefined || group === 0);
}
