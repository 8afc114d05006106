// Prompts this agent sent to each local pod that have not had their first token yet. Pure.
//
// The precise index knows what a pod's engine has stored, and a prompt's blocks are stored as its
// prefill computes them: a burst of one customer's requests would each find the context nowhere
// and be spread over the pool, each pod computing it again. A request sent behind one still being
// prefilled finds those blocks computed by the time its own turn comes, so, for pods the precise
// index decides, the pool counts the longest prefix in flight there as cached too
// (bench:routing-prefix-pressure, docs/prefix-routing.md). Entries are the prompt's chained block
// hashes (agent/prefix/blocks.ts), counted, so prompts sharing a context release it one by one.

export class InflightPrefixes {
  readonly #pods = new Map<string, Map<number, number>>();

  /** `blocks` (a prompt's chained hashes, in order) are in flight at `podId` until the returned release is called (once is enough). */
  add(podId: string, blocks: readonly number[]): () => void {
    if (blocks.length === 0) return () => {};
    let counts = this.#pods.get(podId);
    if (!counts) this.#pods.set(podId, (counts = new Map()));
    for (const hash of blocks) counts.set(hash, (counts.get(hash) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      for (const hash of blocks) {
        const n = counts.get(hash)! - 1;
        if (n > 0) counts.set(hash, n);
        else counts.delete(hash);
      }
      if (counts.size === 0 && this.#pods.get(podId) === counts) this.#pods.delete(podId);
    };
  }

  /**
   * How many leading `blocks` some prompt in flight at `podId` shares. Hashes are chained, so a
   * prompt holding block i holds every block before it: a binary search finds the end of the run.
   */
  leadingBlocks(podId: string, blocks: readonly number[]): number {
    const counts = this.#pods.get(podId);
    if (!counts || blocks.length === 0 || !counts.has(blocks[0])) return 0;
    let lo = 1;
    let hi = blocks.length;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (counts.has(blocks[mid - 1])) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }
}
