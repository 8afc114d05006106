// Applying other origins' deltas to the gossip state (state.ts): a full state replaces what is
// held of an origin, an increment extends it without a gap; with a keyring, only what the origin's
// own key signed (signatures.ts). Pure: no sockets, no timers; the caller passes the clock in.
import type { KeyObject } from 'node:crypto';
import type { OriginTable } from './origins.ts';
import { makeRecord, newOrigin, type OriginRecord, type PodRecord } from './records.ts';
import { epochOf, publicKeyFromRaw, stampMessage, stateHash, type Keyring, type verifyStamp } from './signatures.ts';
import { originId, type OriginDeltaWire, type PodEntryWire } from './wire.ts';

export type Outcome = 'data' | 'advanced' | 'stale' | 'rejected' | 'untrusted' | 'gap';

export interface ApplyResult {
  /** Pods appeared, changed or went. */
  dataChanged: boolean;
  /** Origins whose version advanced. */
  advanced: number;
  /** Deltas that did not start at or below the version held (lost or reordered datagrams). */
  gaps: number;
  /** Deltas refused: for our own origin, an id that does not match its node, over a limit. */
  rejected: number;
  /** Deltas refused because their origin's signature did not verify, or its key is not trusted. */
  untrusted: number;
}

export interface ApplyLimits {
  maxOrigins: number;
  maxPodsPerOrigin: number;
  maxTombstonesPerOrigin: number;
  maxOriginsPerKey: number;
}

/** Tombstones are bounded; dropping the oldest raises the floor below which full states are sent. */
export function evictTombstones(origin: OriginRecord, max: number, freed?: (slot: number) => void): void {
  const tombstones = [...origin.pods.values()].filter((r) => r.entry.removed);
  if (tombstones.length <= max) return;
  tombstones.sort((a, b) => a.entry.version - b.entry.version);
  for (const t of tombstones.slice(0, tombstones.length - max)) {
    origin.pods.delete(t.entry.slot);
    origin.floor = Math.max(origin.floor, t.entry.version);
    freed?.(t.entry.slot);
  }
}

/** Stores the received entry itself (its `info`, if any, is ignored: identity lives in the record). */
function recordFor(e: PodEntryWire, held?: PodRecord): PodRecord {
  if (e.removed) return makeRecord(e, undefined, 0);
  if (e.info) return makeRecord(e, e.info, e.version);
  const record = makeRecord(e, held!.info, held!.infoVersion);
  // The pod a router sees includes the adapters it holds: rebuilt when those may have changed.
  if (!e.maxLora && !held!.entry.maxLora) record.pod = held!.pod;
  return record;
}

/** Applies one origin's delta to the table; each applies whole (leaving its origin at `to`) or not at all. */
export class DeltaApplier {
  readonly #origins: OriginTable;
  readonly #self: OriginRecord;
  readonly #limits: ApplyLimits;
  /** With one, remote origins must be signed by a key it trusts. */
  readonly #keyring: Keyring | undefined;
  readonly #verify: typeof verifyStamp;

  constructor(
    origins: OriginTable,
    self: OriginRecord,
    limits: ApplyLimits,
    keyring: Keyring | undefined,
    verify: typeof verifyStamp,
  ) {
    this.#origins = origins;
    this.#self = self;
    this.#limits = limits;
    this.#keyring = keyring;
    this.#verify = verify;
  }

  apply(d: OriginDeltaWire, now: number): Outcome {
    return d.from === 0 ? this.#applyFull(d, now) : this.#applyIncrement(d, now);
  }

  #applyFull(d: OriginDeltaWire, now: number): Outcome {
    if (d.origin !== originId(d.node, d.incarnation)) return 'rejected';
    if (d.node === this.#self.node && d.agent === this.#self.agent) {
      // Our own previous incarnation, still held by peers: nobody else writes our pods.
      this.#origins.ignore(d.origin, Infinity, now);
      return 'rejected';
    }
    if (this.#origins.isIgnored(d.origin, d.to, now)) return 'stale';
    // Another agent on our node (a rollout's surge) is held and relayed like any origin; the pool
    // never reads our node's pods from gossip.
    let o = this.#origins.byAgent(d.node, d.agent);
    if (o && o.id !== d.origin && o.incarnation > d.incarnation) {
      this.#origins.ignore(d.origin, Infinity, now);
      return 'stale';
    }
    if (o && o.id === d.origin && o.version >= d.to) return 'stale';
    const pods = this.#fullPods(d);
    if (pods === undefined) return 'rejected';
    // Checked before anything held is replaced: an impostor's state replaces nothing.
    const key = this.#keyring ? this.#trustedKey(d, pods, o) : undefined;
    if (this.#keyring && key === undefined) return 'untrusted';
    if (o && o.id !== d.origin) {
      this.#origins.remove(o);
      this.#origins.ignore(o.id, Infinity, now);
      o = undefined;
    }
    if (o === undefined) {
      if (this.#origins.size >= this.#limits.maxOrigins) return 'rejected';
      o = newOrigin(d.origin, d.node, d.agent, d.incarnation, now - d.ageMs);
      this.#origins.add(o);
    }
    if (key) {
      o.key = key;
      o.keyRaw = d.key;
      o.stamp = d.stamp;
    }
    o.pods = pods;
    o.floor = d.floor;
    let newest = d.floor;
    for (const r of pods.values()) newest = Math.max(newest, r.entry.version);
    o.resumeAt = d.to;
    this.#origins.advance(o, d.to, now - d.ageMs, now, true);
    o.dataVersion = Math.min(d.to, newest);
    return 'data';
  }

  /**
   * The origin's key, when the keyring trusts it for the node, its stamp verifies over `pods`, and
   * the key does not already hold its share of origins (`replacing` aside).
   */
  #trustedKey(
    d: OriginDeltaWire,
    pods: Map<number, PodRecord>,
    replacing: OriginRecord | undefined,
  ): KeyObject | undefined {
    const current = this.#origins.byAgent(d.node, d.agent);
    const held = current && current.membership !== 'left' ? current.keyRaw : undefined;
    if (!d.key || !d.stamp || !this.#keyring!.trusts(d.node, d.agent, d.key, held)) return undefined;
    const key = publicKeyFromRaw(d.key);
    if (!key) return undefined;
    const subject = { id: d.origin, node: d.node, agent: d.agent, incarnation: d.incarnation };
    if (!this.#verify(key, stampMessage(subject, d.to, stateHash(pods)), d.stamp)) return undefined;
    let sameKey = 0;
    for (const o of this.#origins.values())
      if (o !== replacing && o.id !== d.origin && o.keyRaw && Buffer.compare(o.keyRaw, d.key) === 0) sameKey++;
    return sameKey < this.#limits.maxOriginsPerKey ? key : undefined;
  }

  #fullPods(d: OriginDeltaWire): Map<number, PodRecord> | undefined {
    const pods = new Map<number, PodRecord>();
    let live = 0;
    for (const e of d.pods) {
      if (!e.removed && !e.info) return undefined;
      if (!e.removed) live++;
      pods.set(e.slot, recordFor(e));
    }
    const { maxPodsPerOrigin, maxTombstonesPerOrigin } = this.#limits;
    if (live > maxPodsPerOrigin || pods.size - live > maxTombstonesPerOrigin) return undefined;
    return pods;
  }

  #applyIncrement(d: OriginDeltaWire, now: number): Outcome {
    const o = this.#origins.get(d.origin);
    if (o === undefined) return 'gap';
    if (o === this.#self) return 'rejected';
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
    if (live > this.#limits.maxPodsPerOrigin) return 'rejected';
    if (this.#keyring && !this.#signedIncrement(o, d, fresh)) return 'untrusted';
    for (const e of fresh) {
      o.pods.set(e.slot, recordFor(e, o.pods.get(e.slot)));
      o.dataVersion = Math.max(o.dataVersion, e.version);
    }
    if (fresh.some((e) => e.removed)) evictTombstones(o, this.#limits.maxTombstonesPerOrigin);
    this.#origins.advance(o, d.to, now - d.ageMs, now, fresh.length > 0);
    o.resumeAt = d.continuesFull ? d.to : -1;
    return fresh.length > 0 ? 'data' : 'advanced';
  }

  /**
   * Within the epoch held: heartbeats, which change no pod. A new epoch: its stamp must verify
   * over the pods we would then hold (and is kept, to relay).
   */
  #signedIncrement(o: OriginRecord, d: OriginDeltaWire, fresh: PodEntryWire[]): boolean {
    if (epochOf(d.to) === epochOf(o.version)) return fresh.length === 0;
    const next = new Map(o.pods);
    for (const e of fresh) next.set(e.slot, recordFor(e, next.get(e.slot)));
    if (!o.key || !d.stamp || !this.#verify(o.key, stampMessage(o, d.to, stateHash(next)), d.stamp)) return false;
    o.stamp = d.stamp;
    return true;
  }
}
