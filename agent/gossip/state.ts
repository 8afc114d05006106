// The gossip protocol's state: a versioned map per origin (scuttlebutt). Pure: no sockets, no
// timers; the caller passes the clock in.
//
// Invariants:
// - Only this node writes its own origin; entries carry the origin version they changed at.
// - For every origin held at version v, every entry whose latest version is <= v is held exactly
//   as the origin wrote it. Deltas apply only without a gap (from <= v < to) and in version
//   order, so v never overstates what is held.
// - An origin advances at least every heartbeat, so "silent" means "its version stopped", and one
//   silent for ttlMs is dropped, wherever its news came from (relayed deltas carry their age).
import type { PodEstimate } from '../types.ts';
import { DigestPacker, emptyDigest, pushEntry, shardMembers, wholeFits } from './packing.ts';
import { Recent } from './recent.ts';
import {
  entryOf,
  estimateOf,
  infoOf,
  loadChanged,
  makeRecord,
  newOrigin,
  sameInfo,
  tombstoneOf,
  type OriginRecord,
  type PodRecord,
} from './records.ts';
import {
  fieldSize,
  entrySize,
  infoFieldSize,
  originId,
  type DigestWire,
  type OriginDeltaWire,
  type PodEntryWire,
  type PodInfoWire,
} from './wire.ts';

export interface GossipStateOptions {
  nodeId: string;
  /** This agent's boot time (ms): makes a restarted agent a new origin instance. */
  incarnation: number;
  ttlMs?: number;
  /** Advance at least this often even when nothing changed; default ttlMs / 3. */
  heartbeatMs?: number;
  /** The gossip round: news younger than a round is pushed, pod changes for two rounds. */
  roundMs?: number;
  /** Bytes of a digest spent on a complete shard of the origins (anti-entropy, discovery). */
  shardBytes?: number;
  /** Largest version group (bytes of entries sharing one version), so any group fits a datagram. */
  groupBytes?: number;
  maxOrigins?: number;
  maxPodsPerOrigin?: number;
  maxTombstonesPerOrigin?: number;
}

export type RemoteEstimate = PodEstimate & { ageMs: number };

export interface ApplyResult {
  /** Pods appeared, changed or went. */
  dataChanged: boolean;
  /** Origins whose version advanced. */
  advanced: number;
  /** Deltas that did not start at or below the version held (lost or reordered datagrams). */
  gaps: number;
  /** Deltas refused: for our own origin, an id that does not match its node, over a limit. */
  rejected: number;
}

/** Someone needs `origin` from `since`. */
export interface Send {
  origin: OriginRecord;
  since: number;
}

export interface Comparison {
  sends: Send[];
  /** Origins the peer knows newer with data we lack: our versions, to ask for them. */
  want: DigestWire;
  /** Origins the peer is behind on by heartbeats only: versions it can adopt. */
  heartbeats: DigestWire;
  /** Origins we adopted newer versions of from the digest itself. */
  adopted: number;
  /** Origins whose pods changed recently that the peer did not mention: it may want them. */
  offers: DigestWire;
}

export const emptyComparison = (): Comparison => ({
  sends: [],
  want: emptyDigest(),
  heartbeats: emptyDigest(),
  adopted: 0,
  offers: emptyDigest(),
});
// A reply offers every recent pod change the asker did not mention (up to this many), and a few
// heartbeats: most agents hear those anyway, and the rest pull them when they fall behind.
const dataOffersPerReply = 32;
const heartbeatOffersPerReply = 16;
// A reply asks for at most this many origins about to age out (they are also in our digests).
const atRiskWantsPerReply = 32;

export class GossipState {
  readonly nodeId: string;
  readonly incarnation: number;
  readonly ttlMs: number;
  readonly heartbeatMs: number;
  readonly roundMs: number;
  /** Pod data this recent is offered to every peer. */
  readonly hotMs: number;
  /** An origin this long without advancing is asked about in every digest. */
  readonly riskMs: number;
  readonly shardBytes: number;
  readonly groupBytes: number;
  readonly maxOrigins: number;
  readonly maxPodsPerOrigin: number;
  readonly maxTombstonesPerOrigin: number;

  readonly self: OriginRecord;
  /** Keyed by id | 0: int32 keys are small integers to V8, where most uint32 ids would be boxed. */
  #byId = new Map<number, OriginRecord>();
  #byNode = new Map<string, OriginRecord>();
  /** Ids sorted ascending, for shard ranges; rebuilt when origins come or go. */
  #sortedIds: number[] | undefined;
  /** Ids not to fetch again: superseded incarnations (forever) and expired origins (unless newer). */
  #ignored = new Map<number, { version: number; until: number }>();
  /** Recent advances, oldest first: what digests offer first. Pod changes also in #recentData. */
  #recent = new Recent();
  #recentData = new Recent();
  /** Origins that missed heartbeats, oldest first, as of the last expire(). */
  #atRisk: OriginRecord[] = [];

  #slotByUid = new Map<string, number>();
  #freeSlots: number[] = [];
  #nextSlot = 0;
  #lastBump: number;
  /** Local pods skipped because one pod's entry would not fit a datagram. */
  oversizedPods = 0;

  constructor(options: GossipStateOptions) {
    this.nodeId = options.nodeId;
    this.incarnation = Math.floor(options.incarnation); // sent as an integer, and hashed into our id
    this.ttlMs = options.ttlMs ?? 3000;
    this.heartbeatMs = options.heartbeatMs ?? Math.floor(this.ttlMs / 3);
    this.roundMs = options.roundMs ?? 200;
    this.hotMs = 2 * this.roundMs;
    // Past one heartbeat and half the time left before the TTL: a heartbeat was missed, not late.
    this.riskMs = this.heartbeatMs + (this.ttlMs - this.heartbeatMs) / 2;
    this.shardBytes = options.shardBytes ?? 160;
    this.groupBytes = options.groupBytes ?? 1000;
    this.maxOrigins = options.maxOrigins ?? 4096;
    this.maxPodsPerOrigin = options.maxPodsPerOrigin ?? 256;
    this.maxTombstonesPerOrigin = options.maxTombstonesPerOrigin ?? 64;
    this.self = newOrigin(originId(this.nodeId, this.incarnation), this.nodeId, this.incarnation, options.incarnation);
    this.#lastBump = options.incarnation;
    this.#add(this.self);
  }

  // --- our own origin -----------------------------------------------------------------------

  /**
   * Replaces our pods' estimates. Bumps the version only for meaningful changes; changed entries
   * share one version unless they would not fit one datagram together. Returns whether anything
   * changed.
   */
  localUpdate(estimates: readonly PodEstimate[], now: number): boolean {
    const self = this.self;
    const next = new Map<string, PodEstimate>();
    for (const e of estimates) if (next.size < this.maxPodsPerOrigin) next.set(e.pod.uid, e);

    const changes: { entry: PodEntryWire; info?: PodInfoWire; infoVersion?: number }[] = [];
    for (const [uid, slot] of this.#slotByUid) {
      if (next.has(uid)) continue;
      this.#slotByUid.delete(uid);
      changes.push({ entry: tombstoneOf(slot, 0) });
    }
    for (const [uid, e] of next) {
      const slot = this.#slotByUid.get(uid);
      const held = slot === undefined ? undefined : self.pods.get(slot);
      const info = infoOf(e.pod, this.nodeId);
      const entry = entryOf(e, slot ?? 0, 0, this.incarnation);
      const sameIdentity = sameInfo(held?.info, info);
      if (sameIdentity && !loadChanged(held!.entry, entry)) continue;
      // Room for the largest slot and version numbers: one pod must fit any datagram.
      if (fieldSize(entrySize(entry) + 10 + infoFieldSize(info)) > this.groupBytes) {
        this.oversizedPods++;
        continue;
      }
      if (slot === undefined) {
        entry.slot = this.#allocateSlot();
        this.#slotByUid.set(uid, entry.slot);
      }
      // infoVersion undefined: the identity is new, and changes at this update's version.
      changes.push(sameIdentity ? { entry, info: held!.info, infoVersion: held!.infoVersion } : { entry, info });
    }
    if (changes.length === 0) return false;

    let version = self.version + 1;
    let groupUsed = 0;
    for (const c of changes) {
      c.entry.version = version;
      // A full state carries every identity, so size groups as if this one did.
      const bytes = fieldSize(entrySize(c.entry) + (c.info ? infoFieldSize(c.info) : 0));
      if (groupUsed > 0 && groupUsed + bytes > this.groupBytes) {
        c.entry.version = ++version;
        groupUsed = 0;
      }
      groupUsed += bytes;
      self.pods.set(c.entry.slot, makeRecord(c.entry, c.info, c.infoVersion ?? version));
    }
    self.version = version;
    self.dataVersion = version;
    self.lastAdvance = self.lastData = this.#lastBump = now;
    this.#noteAdvance(self, now, true);
    this.#evictTombstones(self);
    return true;
  }

  /** Advances our version if it has not moved for a heartbeat interval. */
  heartbeat(now: number): boolean {
    if (now - this.#lastBump < this.heartbeatMs) return false;
    this.self.version++;
    this.self.lastAdvance = this.#lastBump = now;
    this.#noteAdvance(this.self, now, false);
    return true;
  }

  #allocateSlot(): number {
    return this.#freeSlots.pop() ?? this.#nextSlot++;
  }

  /** Tombstones are bounded; dropping the oldest raises the floor below which we send full states. */
  #evictTombstones(origin: OriginRecord): void {
    const tombstones = [...origin.pods.values()].filter((r) => r.entry.removed);
    if (tombstones.length <= this.maxTombstonesPerOrigin) return;
    tombstones.sort((a, b) => a.entry.version - b.entry.version);
    for (const t of tombstones.slice(0, tombstones.length - this.maxTombstonesPerOrigin)) {
      origin.pods.delete(t.entry.slot);
      origin.floor = Math.max(origin.floor, t.entry.version);
      if (origin === this.self) this.#freeSlots.push(t.entry.slot);
    }
  }

  // --- digests --------------------------------------------------------------------------------

  /**
   * What we know, in at most `maxBytes`. Two random agents differ on whichever origins advanced
   * in the last second or so, and on little else, so a digest lists, in order: our own origin;
   * origins whose pods changed recently (fresh data is what routing waits for); origins that
   * missed heartbeats (a peer may have heard them: pulled before they age out); what we learned
   * in the last round (pushed; `slot` of `slots` spreads it over this round's peers, so each
   * piece of news goes to two of them); and one complete shard of the id space, rotating with
   * `cursor` (repairs anything missed, and tells the receiver what we lack). A small cluster's
   * whole state fits the shard budget: then every digest is complete.
   */
  digest(maxBytes: number, cursor: number, now: number, slot = 0, slots = 1): DigestWire {
    const packer = new DigestPacker(maxBytes);
    packer.add(this.self, maxBytes);
    const shardBudget = Math.min(this.shardBytes, maxBytes / 4);
    const ids = this.#ids();
    if (wholeFits(ids.length, shardBudget)) {
      for (const id of ids) packer.add(this.#get(id)!, maxBytes);
      packer.digest.shards = 1;
      return packer.digest;
    }
    const room = maxBytes - shardBudget;
    this.#recentData.each(now, this.hotMs, (o) => packer.add(o, room / 2));
    for (const o of this.#atRisk) if (!packer.add(o, (room * 3) / 4)) break;
    // News goes to two of the round's peers: pushed to one, a heartbeat's spread is a critical
    // branching process that loss snuffs out; to all three costs half as much again.
    let i = 0;
    const copies = Math.min(2, slots);
    this.#recent.each(now, this.roundMs, (o) => (i++ + slot) % slots >= copies || packer.add(o, room));
    packer.addShard(ids, (id) => this.#get(id)!, cursor, Math.min(shardBudget, maxBytes - packer.used));
    return packer.digest;
  }

  /**
   * Compares a peer's digest (or offers, `offers` true: then what the peer lacks is not our
   * business, and we offer nothing back) with what we hold; adopts heartbeat-only advances on
   * the spot.
   */
  compare(digest: DigestWire, now: number, offers = false): Comparison {
    const result = emptyComparison();
    const mentioned = new Set<number>();
    for (let i = 0; i < digest.origins.length; i++) {
      const id = digest.origins[i];
      const theirs = digest.versions[i];
      mentioned.add(id);
      const o = this.#get(id);
      if (o === undefined) {
        if (!this.#isIgnored(id, theirs, now)) pushEntry(result.want, id, 0);
      } else if (o.version > theirs) {
        if (!offers) this.#offer(o, theirs, result);
      } else if (o.version < theirs && o !== this.self) {
        const theirData = digest.dataLag.length ? theirs - digest.dataLag[i] : theirs;
        if (o.version >= theirData) {
          this.#advance(o, theirs, now, now, false);
          result.adopted++;
        } else {
          pushEntry(result.want, id, o.version);
        }
      }
    }
    if (offers) return result;
    // Pull what we are about to age out: whoever sent this digest may have heard it since.
    for (const o of this.#atRisk) {
      if (result.want.origins.length >= atRiskWantsPerReply) break;
      if (!mentioned.has(o.id) && !o.gone) pushEntry(result.want, o.id, o.version);
    }
    if (digest.shards > 0) {
      for (const o of shardMembers(this.#ids(), digest.shard, digest.shards).map((id) => this.#get(id)!)) {
        if (!mentioned.has(o.id) && o.version > 0) {
          mentioned.add(o.id);
          result.sends.push({ origin: o, since: 0 });
        }
      }
    }
    // Push-pull: the news we hold that the peer did not mention, fresh pod data first.
    let limit = dataOffersPerReply;
    const offer = (o: OriginRecord): boolean => {
      if (result.offers.origins.length >= limit) return false;
      if (!mentioned.has(o.id)) {
        mentioned.add(o.id);
        pushEntry(result.offers, o.id, o.version, o.version - o.dataVersion);
      }
      return true;
    };
    this.#recentData.each(now, this.hotMs, offer);
    limit = result.offers.origins.length + heartbeatOffersPerReply;
    this.#recent.each(now, this.roundMs, offer);
    return result;
  }

  /** What to send for a peer's request (a `want` digest). */
  answer(want: DigestWire): Comparison {
    const result = emptyComparison();
    for (let i = 0; i < want.origins.length; i++) {
      const o = this.#get(want.origins[i]);
      if (o && o.version > want.versions[i]) this.#offer(o, want.versions[i], result);
    }
    return result;
  }

  /** A peer at `theirs` needs o: a heartbeat entry when it lacks no data, else a delta. */
  #offer(o: OriginRecord, theirs: number, result: Comparison): void {
    if (theirs > 0 && theirs >= o.dataVersion && theirs >= o.floor) {
      pushEntry(result.heartbeats, o.id, o.version, o.version - o.dataVersion);
    } else {
      result.sends.push({ origin: o, since: theirs });
    }
  }

  /** Adopts versions a peer says are heartbeats past data we already hold. */
  adoptHeartbeats(heartbeats: DigestWire, now: number): number {
    let adopted = 0;
    for (let i = 0; i < heartbeats.origins.length; i++) {
      const o = this.#get(heartbeats.origins[i]);
      const theirs = heartbeats.versions[i];
      const theirData = theirs - (heartbeats.dataLag[i] ?? 0);
      if (o && o !== this.self && o.version < theirs && o.version >= theirData) {
        this.#advance(o, theirs, now, now, false);
        adopted++;
      }
    }
    return adopted;
  }

  // --- deltas ---------------------------------------------------------------------------------

  /** Applies deltas; each either applies whole and leaves its origin at exactly `to`, or not at all. */
  apply(deltas: readonly OriginDeltaWire[], now: number): ApplyResult {
    const result: ApplyResult = { dataChanged: false, advanced: 0, gaps: 0, rejected: 0 };
    for (const d of deltas) {
      if (d.ageMs >= this.ttlMs) continue; // news of an origin that is already silent too long
      const outcome = d.from === 0 ? this.#applyFull(d, now) : this.#applyIncrement(d, now);
      if (outcome === 'gap') result.gaps++;
      else if (outcome === 'rejected') result.rejected++;
      else if (outcome !== 'stale') {
        result.advanced++;
        if (outcome === 'data') result.dataChanged = true;
      }
    }
    return result;
  }

  #applyFull(d: OriginDeltaWire, now: number): 'data' | 'advanced' | 'stale' | 'rejected' | 'gap' {
    if (d.origin !== originId(d.node, d.incarnation)) return 'rejected';
    if (d.node === this.nodeId) {
      // Our own previous incarnation, still held by peers: nobody else writes our pods.
      this.#ignore(d.origin, Infinity, now);
      return 'rejected';
    }
    if (this.#isIgnored(d.origin, d.to, now)) return 'stale';
    let o = this.#byNode.get(d.node);
    if (o && o.id !== d.origin) {
      if (o.incarnation > d.incarnation) {
        this.#ignore(d.origin, Infinity, now);
        return 'stale';
      }
      this.#remove(o);
      this.#ignore(o.id, Infinity, now);
      o = undefined;
    }
    if (o && o.version >= d.to) return 'stale';
    const pods = this.#fullPods(d);
    if (pods === undefined) return 'rejected';
    if (o === undefined) {
      if (this.#byId.size >= this.maxOrigins) return 'rejected';
      o = newOrigin(d.origin, d.node, d.incarnation, now - d.ageMs);
      this.#add(o);
    }
    o.pods = pods;
    o.floor = d.floor;
    let newest = d.floor;
    for (const r of pods.values()) newest = Math.max(newest, r.entry.version);
    o.resumeAt = d.to;
    this.#advance(o, d.to, now - d.ageMs, now, true);
    o.dataVersion = Math.min(d.to, newest);
    return 'data';
  }

  #fullPods(d: OriginDeltaWire): Map<number, PodRecord> | undefined {
    const pods = new Map<number, PodRecord>();
    let live = 0;
    for (const e of d.pods) {
      if (!e.removed && !e.info) return undefined;
      if (!e.removed) live++;
      pods.set(e.slot, this.#recordFor(e));
    }
    if (live > this.maxPodsPerOrigin || pods.size - live > this.maxTombstonesPerOrigin) return undefined;
    return pods;
  }

  #applyIncrement(d: OriginDeltaWire, now: number): 'data' | 'advanced' | 'stale' | 'rejected' | 'gap' {
    const o = this.#get(d.origin);
    if (o === undefined) return 'gap';
    if (o === this.self) return 'rejected';
    if (o.version >= d.to) return 'stale';
    if (o.version < d.from) return 'gap';
    // The rest of a full state: exact only for whoever took its first part, or is past the
    // sender's floor (then it is an ordinary delta that happens to carry identities).
    if (d.continuesFull && o.resumeAt !== d.from && o.version < d.floor) return 'gap';
    const fresh = d.pods.filter((e) => e.version > o.version);
    let live = 0;
    for (const r of o.pods.values()) if (!r.entry.removed) live++;
    for (const e of fresh) {
      const held = o.pods.get(e.slot);
      // An entry without identity for a slot we cannot name: we are not where we think we are.
      if (!e.removed && !e.info && !held?.info) return 'gap';
      live += (e.removed ? 0 : 1) - (held && !held.entry.removed ? 1 : 0);
    }
    if (live > this.maxPodsPerOrigin) return 'rejected';
    for (const e of fresh) {
      o.pods.set(e.slot, this.#recordFor(e, o.pods.get(e.slot)));
      o.dataVersion = Math.max(o.dataVersion, e.version);
    }
    if (fresh.some((e) => e.removed)) this.#evictTombstones(o);
    this.#advance(o, d.to, now - d.ageMs, now, fresh.length > 0);
    o.resumeAt = d.continuesFull ? d.to : -1;
    return fresh.length > 0 ? 'data' : 'advanced';
  }

  /** Stores the received entry itself (its `info`, if any, is ignored: identity lives in the record). */
  #recordFor(e: PodEntryWire, held?: PodRecord): PodRecord {
    if (e.removed) return makeRecord(e, undefined, 0);
    if (e.info) return makeRecord(e, e.info, e.version);
    const record = makeRecord(e, held!.info, held!.infoVersion);
    record.pod = held!.pod;
    return record;
  }

  // --- liveness -------------------------------------------------------------------------------

  /** `seenAt`: when the origin was last known to advance (now, less a relayed age). */
  #advance(o: OriginRecord, version: number, seenAt: number, now: number, data: boolean): void {
    o.version = version;
    o.lastAdvance = Math.max(o.lastAdvance, seenAt);
    if (data) o.lastData = now;
    else o.resumeAt = -1;
    this.#noteAdvance(o, now, data);
  }

  #noteAdvance(o: OriginRecord, at: number, data: boolean): void {
    // Bounded: about two advances per origin known (the window read is a round or two).
    const bound = 2 * this.#byId.size + 64;
    this.#recent.push(o, at, bound);
    if (data) this.#recentData.push(o, at, bound);
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
      this.#remove(o);
      // Peers that have not expired it yet still offer it: do not fetch the same version back.
      this.#ignore(o.id, o.version, now);
      gone.push(o.node);
    }
    for (const [id, entry] of this.#ignored) if (entry.until < now) this.#ignored.delete(id);
    this.#atRisk.sort((a, b) => a.lastAdvance - b.lastAdvance);
    return gone;
  }

  #ignore(id: number, version: number, now: number): void {
    this.#ignored.set(id, { version, until: now + 2 * this.ttlMs });
  }

  #isIgnored(id: number, version: number, now: number): boolean {
    const entry = this.#ignored.get(id);
    if (entry === undefined || entry.until < now) return false;
    if (version <= entry.version) return true;
    this.#ignored.delete(id); // it advanced after all: alive again
    return false;
  }

  // --- reading --------------------------------------------------------------------------------

  /** Every pod of every other origin heard from within the TTL. */
  remoteEstimates(now: number): RemoteEstimate[] {
    const out: RemoteEstimate[] = [];
    for (const o of this.#byId.values()) {
      if (o === this.self || now - o.lastAdvance > this.ttlMs) continue;
      for (const r of o.pods.values()) if (!r.entry.removed) out.push(estimateOf(o, r, now));
    }
    return out;
  }

  /** Other origins heard from within the TTL. */
  origins(now: number): { origin: string; pods: number; version: number; ageMs: number }[] {
    const out = [];
    for (const o of this.#byId.values()) {
      if (o === this.self || now - o.lastAdvance > this.ttlMs) continue;
      let pods = 0;
      for (const r of o.pods.values()) if (!r.entry.removed) pods++;
      out.push({ origin: o.node, pods, version: o.version, ageMs: Math.max(0, now - o.lastAdvance) });
    }
    return out;
  }

  origin(node: string): OriginRecord | undefined {
    return this.#byNode.get(node);
  }

  get size(): number {
    return this.#byId.size;
  }

  // --- bookkeeping ----------------------------------------------------------------------------

  #add(o: OriginRecord): void {
    this.#byId.set(o.id | 0, o);
    this.#byNode.set(o.node, o);
    this.#sortedIds = undefined;
  }

  #remove(o: OriginRecord): void {
    o.gone = true;
    this.#byId.delete(o.id | 0);
    if (this.#byNode.get(o.node) === o) this.#byNode.delete(o.node);
    this.#sortedIds = undefined;
  }

  #get(id: number): OriginRecord | undefined {
    return this.#byId.get(id | 0);
  }

  #ids(): number[] {
    this.#sortedIds ??= [...this.#byId.keys()].map((k) => k >>> 0).sort((a, b) => a - b);
    return this.#sortedIds;
  }
}
