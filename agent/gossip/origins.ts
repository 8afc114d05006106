// The origins a gossip node holds, indexed by id and by node, and their liveness: when each last
// advanced, which are about to age out, and which ids not to fetch again. Pure: the caller passes
// the clock in. GossipState decides what the versions mean; this only keeps them findable.
import { Recent } from './recent.ts';
import type { OriginRecord } from './records.ts';

export class OriginTable {
  readonly self: OriginRecord;
  readonly ttlMs: number;
  /** An origin this long without advancing is asked about in every digest. */
  readonly riskMs: number;
  /** Recent advances, oldest first: what digests offer first. Pod changes also in `recentData`. */
  readonly recent = new Recent();
  readonly recentData = new Recent();
  /** Keyed by id | 0: int32 keys are small integers to V8, where most uint32 ids would be boxed. */
  #byId = new Map<number, OriginRecord>();
  #byNode = new Map<string, OriginRecord>();
  /** Ids sorted ascending, for shard ranges; rebuilt when origins come or go. */
  #sortedIds: number[] | undefined;
  /** Ids not to fetch again: superseded incarnations (forever) and expired origins (unless newer). */
  #ignored = new Map<number, { version: number; until: number }>();
  /** Origins that missed heartbeats, oldest first, as of the last expire(). */
  #atRisk: OriginRecord[] = [];

  constructor(self: OriginRecord, ttlMs: number, riskMs: number) {
    this.self = self;
    this.ttlMs = ttlMs;
    this.riskMs = riskMs;
    this.add(self);
  }

  get size(): number {
    return this.#byId.size;
  }

  get atRisk(): readonly OriginRecord[] {
    return this.#atRisk;
  }

  get(id: number): OriginRecord | undefined {
    return this.#byId.get(id | 0);
  }

  byNode(node: string): OriginRecord | undefined {
    return this.#byNode.get(node);
  }

  values(): IterableIterator<OriginRecord> {
    return this.#byId.values();
  }

  ids(): number[] {
    this.#sortedIds ??= [...this.#byId.keys()].map((k) => k >>> 0).sort((a, b) => a - b);
    return this.#sortedIds;
  }

  add(o: OriginRecord): void {
    this.#byId.set(o.id | 0, o);
    this.#byNode.set(o.node, o);
    this.#sortedIds = undefined;
  }

  remove(o: OriginRecord): void {
    o.gone = true;
    this.#byId.delete(o.id | 0);
    if (this.#byNode.get(o.node) === o) this.#byNode.delete(o.node);
    this.#sortedIds = undefined;
  }

  /** `seenAt`: when the origin was last known to advance (now, less a relayed age). */
  advance(o: OriginRecord, version: number, seenAt: number, now: number, data: boolean): void {
    o.version = version;
    o.lastAdvance = Math.max(o.lastAdvance, seenAt);
    if (data) o.lastData = now;
    else o.resumeAt = -1;
    this.noteAdvance(o, now, data);
  }

  noteAdvance(o: OriginRecord, at: number, data: boolean): void {
    // Bounded: about two advances per origin known (the window read is a round or two).
    const bound = 2 * this.#byId.size + 64;
    this.recent.push(o, at, bound);
    if (data) this.recentData.push(o, at, bound);
  }

  /** Drops origins silent for longer than the TTL; returns their nodes. Notes those at risk. */
  expire(now: number): string[] {
    const gone: string[] = [];
    this.#atRisk = [];
    for (const o of this.#byId.values()) {
      if (o === this.self || now - o.lastAdvance <= this.riskMs) continue;
      if (now - o.lastAdvance <= this.ttlMs) {
        this.#atRisk.push(o);
        continue;
      }
      this.remove(o);
      // Peers that have not expired it yet still offer it: do not fetch the same version back.
      this.ignore(o.id, o.version, now);
      gone.push(o.node);
    }
    for (const [id, entry] of this.#ignored) if (entry.until < now) this.#ignored.delete(id);
    this.#atRisk.sort((a, b) => a.lastAdvance - b.lastAdvance);
    return gone;
  }

  ignore(id: number, version: number, now: number): void {
    this.#ignored.set(id, { version, until: now + 2 * this.ttlMs });
  }

  isIgnored(id: number, version: number, now: number): boolean {
    const entry = this.#ignored.get(id);
    if (entry === undefined || entry.until < now) return false;
    if (version <= entry.version) return true;
    this.#ignored.delete(id); // it advanced after all: alive again
    return false;
  }
}
