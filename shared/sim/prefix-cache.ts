// vLLM-style automatic prefix caching, reduced to what the latency model needs. Pure.
//
// A prompt's full blocks of `blockSize` tokens are named by a hash chained over the blocks before
// them, so a block only matches when the whole prefix up to it matches (vLLM V1 hashes
// (parent hash, block tokens) the same way). Cached blocks are reference-counted by the running
// requests that use them; blocks nobody references stay cached but are free for allocation, and the
// least recently released goes first when space is needed (vLLM's free-block queue).

/** Chained hashes of the full blocks of `tokens`: entry i names tokens [0, (i + 1) · blockSize). */
export function chainedBlockHashes(
  tokens: ArrayLike<number>,
  blockSize: number,
  limitTokens = tokens.length,
): number[] {
  const out: number[] = [];
  const full = Math.floor(Math.min(tokens.length, limitTokens) / blockSize);
  // Two 32-bit lanes (FNV-1a and a murmur-style mix) folded into 52 bits: collisions are negligible
  // at the few hundred thousand blocks a pod holds, and the result stays a safe integer Map key.
  let a = 0x811c9dc5;
  let b = 0x9747b28c;
  for (let block = 0; block < full; block++) {
    for (let i = block * blockSize; i < (block + 1) * blockSize; i++) {
      const t = tokens[i] >>> 0;
      a = Math.imul(a ^ t, 0x01000193);
      b = Math.imul(b ^ t, 0x5bd1e995);
      b ^= b >>> 13;
    }
    out.push((a >>> 0) * 0x100000 + ((b >>> 0) & 0xfffff));
  }
  return out;
}

export class PrefixCache {
  /** Every cached block: hash → requests referencing it. */
  readonly #refs = new Map<number, number>();
  /** Cached blocks with no reference, least recently released first (Map keeps insertion order). */
  readonly #free = new Set<number>();
  /** Told of each block evicted (the simulator's KV events). */
  readonly #onEvict: ((hash: number) => void) | undefined;

  constructor(onEvict?: (hash: number) => void) {
    this.#onEvict = onEvict;
  }

  /** Whether `hash` is cached (held or free). */
  has(hash: number): boolean {
    return this.#refs.has(hash);
  }

  /** Cached blocks held by at least one running request. */
  get referenced(): number {
    return this.#refs.size - this.#free.size;
  }

  /** Cached blocks nobody holds: reusable by a later request, or evicted for space. */
  get evictable(): number {
    return this.#free.size;
  }

  /** How many leading hashes are cached, at most `limit`. */
  match(hashes: readonly number[], limit = hashes.length): number {
    let n = 0;
    while (n < limit && this.#refs.has(hashes[n])) n++;
    return n;
  }

  /**
   * A request holds `hash` from now on. Returns how many blocks this takes from the free space:
   * 1 when the block was absent or evictable, 0 when another request already held it.
   */
  acquire(hash: number): 0 | 1 {
    const refs = this.#refs.get(hash);
    if (refs === undefined) {
      this.#refs.set(hash, 1);
      return 1;
    }
    this.#refs.set(hash, refs + 1);
    if (refs > 0) return 0;
    this.#free.delete(hash);
    return 1;
  }

  /** A request lets go of `hash`. Returns 1 when no request holds it any more (it became evictable). */
  release(hash: number): 0 | 1 {
    const refs = this.#refs.get(hash);
    if (refs === undefined || refs === 0) return 0;
    this.#refs.set(hash, refs - 1);
    if (refs > 1) return 0;
    this.#free.add(hash);
    return 1;
  }

  /** Drops the least recently released unreferenced block; false when there is none. */
  evictOne(): boolean {
    for (const hash of this.#free) {
      this.#free.delete(hash);
      this.#refs.delete(hash);
      this.#onEvict?.(hash);
      return true;
    }
    return false;
  }
}
