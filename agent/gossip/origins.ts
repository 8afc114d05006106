// The origins a gossip node holds, indexed by id and by agent, and their liveness: whether the
// cluster's membership still lists each one's agent, when each last advanced, which are about to
// age out, and which ids not to fetch again. Pure: the caller passes the clock in. GossipState
// decides what the versions mean; this only keeps them findable.
//
// Liveness: an origin whose agent the membership listed and no longer lists has left, and is not
// read from then on (kept and relayed, in case the agent is listed again). The TTL is the backstop
// for what membership cannot see (a lost node, a partition, an agent it names differently): an
// origin silent that long is dropped, listed or not.
import type { KeyObject } from 'node:crypto';
import { Recent } from './recent.ts';
import type { OriginRecord } from './records.ts';

const agentKey = (node: string, agent: string): string => `${node}\u0000${agent}`;

export class OriginTable {
  readonly self: OriginRecord;
  readonly ttlMs: number;
  /** An origin this long without advancing is asked about in every digest. */
  readonly riskMs: number;
  /** Recent pod changes, oldest first: what digests push first. */
  readonly recentData = new Recent();
  /** Keyed by id | 0: int32 keys are small integers to V8, where most uint32 ids would be boxed. */
  #byId = new Map<number, OriginRecord>();
  /** Keyed by agentKey: an agent's newer incarnation replaces its older one. */
  #byAgent = new Map<string, OriginRecord>();
  /** Gossip addresses of the agents the cluster lists as live. */
  #members: ReadonlySet<string> = new Set();
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

  /** The origin of the agent `agent` on `node` ('' for an agent that does not give its address). */
  byAgent(node: string, agent = ''): OriginRecord | undefined {
    return this.#byAgent.get(agentKey(node, agent));
  }

  /** Whether the router may read an origin: not our own, its agent has not left, not silent past the TTL. */
  readable(o: OriginRecord, now: number): boolean {
    return o !== this.self && o.membership !== 'left' && now - o.lastAdvance <= this.ttlMs;
  }

  /**
   * The agents the cluster lists as live (gossip addresses). Returns whether an origin became
   * readable or stopped being so.
   */
  setMembers(members: ReadonlySet<string>): boolean {
    this.#members = members;
    let moved = false;
    for (const o of this.#byId.values()) if (this.#updateMembership(o)) moved = true;
    return moved;
  }

  /** Our own agent's address, known once our socket is bound. */
  setAgent(o: OriginRecord, agent: string): void {
    if (this.#byAgent.get(agentKey(o.node, o.agent)) === o) this.#byAgent.delete(agentKey(o.node, o.agent));
    o.agent = agent;
    this.#byAgent.set(agentKey(o.node, agent), o);
  }

  #updateMembership(o: OriginRecord): boolean {
    if (o === this.self || o.agent === '') return false;
    const next = this.#members.has(o.agent) ? 'member' : o.membership === 'unknown' ? 'unknown' : 'left';
    if (next === o.membership) return false;
    const wasLeft = o.membership === 'left';
    o.membership = next;
    return wasLeft || next === 'left';
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
    this.#byAgent.set(agentKey(o.node, o.agent), o);
    this.#updateMembership(o);
    this.#sortedIds = undefined;
  }

  /**
   * Keys of origins no longer held (replaced by a restart, or expired), by node and incarnation:
   * their budget counters of the current windows still verify (agent/budget/signing.ts). Bounded.
   */
  readonly formerKeys = new Map<string, KeyObject>();

  remove(o: OriginRecord): void {
    if (o.key) {
      this.formerKeys.set(`${o.node}#${o.incarnation}`, o.key);
      if (this.formerKeys.size > 4096) this.formerKeys.delete(this.formerKeys.keys().next().value!);
    }
    o.gone = true;
    this.#byId.delete(o.id | 0);
    const key = agentKey(o.node, o.agent);
    if (this.#byAgent.get(key) === o) this.#byAgent.delete(key);
    this.#sortedIds = undefined;
  }

  /** `seenAt`: when the origin was last known to advance (now, less a relayed age). */
  advance(o: OriginRecord, version: number, seenAt: number, now: number, data: boolean): void {
    o.version = version;
    o.lastAdvance = Math.max(o.lastAdvance, seenAt);
    if (data) {
      o.lastData = now;
      this.noteData(o, now);
    } else {
      o.resumeAt = -1;
    }
  }

  /** Pod data of `o` changed at `at`: pushed in digests for a while (see buildDigest). */
  noteData(o: OriginRecord, at: number): void {
    // Bounded: about two changes per origin known (the window read is a round or two).
    this.recentData.push(o, at, 2 * this.#byId.size + 64);
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
