// Each local pod's prefix summary for gossip (agent/prefix/summary.ts), rebuilt at most once a
// second: each new one is a new gossip version, so rebuilding per round would flood the peers.

/** How often a pod's gossiped prefix summary is rebuilt. */
const SUMMARY_REFRESH_MS = 1000;

export class PrefixSummaries {
  readonly #last = new Map<string, { at: number; summary: Uint8Array | undefined }>();

  /** `uid`'s summary as a gossip entry's field: `build` runs when the last one is a second old. */
  field(uid: string, now: number, build: () => Uint8Array | undefined): { prefixSummary?: Uint8Array } {
    let last = this.#last.get(uid);
    if (!last || now - last.at >= SUMMARY_REFRESH_MS) this.#last.set(uid, (last = { at: now, summary: build() }));
    return last.summary ? { prefixSummary: last.summary } : {};
  }

  forget(uid: string): void {
    this.#last.delete(uid);
  }
}
