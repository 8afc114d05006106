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
//   That is the backstop: liveness comes first from the cluster's membership (setMembers), so the
//   heartbeat can be slow and cheap (ttlMs / 3, default 10 s).
// - An origin is one incarnation of one agent (node + gossip address): two agents on one node
//   are two origins, and a pod both report is read once, from the fresher report.
import type { KeyObject } from 'node:crypto';
import type { PodEstimate } from '../types.ts';
import { DeltaApplier, evictTombstones, type ApplyResult } from './apply.ts';
import { adoptHeartbeats, answerWant, buildDigest, compareDigest, type Comparison } from './compare.ts';
import { OriginTable } from './origins.ts';
import {
  EPOCH_BEATS,
  nextEpochStart,
  PUBLIC_KEY_BYTES,
  SIGNATURE_BYTES,
  stampMessage,
  stateHash,
  verifyStamp,
  type Keyring,
  type OriginSigner,
} from './signatures.ts';
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
} from './records.ts';
import { originId, type DigestWire, type OriginDeltaWire, type PodEntryWire, type PodInfoWire } from './wire.ts';
import { deltaHeaderSize, fieldSize, entrySize, infoFieldSize } from './wire-size.ts';

export type { ApplyResult } from './apply.ts';

/** The default TTL: the backstop behind membership (see docs/concepts.md, "Gossip"). */
export const DEFAULT_TTL_MS = 30_000;

export interface GossipStateOptions {
  nodeId: string;
  /** This agent's gossip address as its peers list it ('' or absent: unknown, see setAgent). */
  agent?: string;
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
  /** Signs our origin (signatures.ts); without one our origin goes unsigned. */
  signer?: OriginSigner;
  /** Decides whose keys speak for which node; with one, only signed origins are accepted. */
  keyring?: Keyring;
  /** Origins one signing key may hold at once (an agent and its restarts or a surge's second agent). */
  maxOriginsPerKey?: number;
  /** Checks a stamp (default verifyStamp); the simulation counts and shares its verdicts. */
  verify?: typeof verifyStamp;
  /**
   * Largest payload of one datagram: a signed full state is sent whole or not at all, so our pods'
   * calibration summaries are left out while with them it would not fit (default: no bound).
   */
  maxStateBytes?: number;
}

export type RemoteEstimate = PodEstimate & { ageMs: number };

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
  readonly maxOriginsPerKey: number;
  readonly maxStateBytes: number;
  /** Our last update left the pods' calibration summaries out (the signed state would not fit). */
  calibrationOmitted = false;
  /** Remote origins must be signed (a keyring was given). */
  readonly signed: boolean;
  readonly #signer: OriginSigner | undefined;
  readonly #applier: DeltaApplier;

  readonly self: OriginRecord;
  readonly #origins: OriginTable;

  #slotByUid = new Map<string, number>();
  #freeSlots: number[] = [];
  #nextSlot = 0;
  #lastBump: number;
  /** Local pods skipped because one pod's entry would not fit a datagram. */
  oversizedPods = 0;

  constructor(options: GossipStateOptions) {
    this.nodeId = options.nodeId;
    this.incarnation = Math.floor(options.incarnation); // sent as an integer, and hashed into our id
    this.ttlMs = options.ttlMs ?? DEFAULT_TTL_MS;
    this.heartbeatMs = options.heartbeatMs ?? Math.floor(this.ttlMs / 3);
    this.roundMs = options.roundMs ?? 200;
    this.hotMs = 4 * this.roundMs;
    // Past one heartbeat and half the time left before the TTL: a heartbeat was missed, not late.
    this.riskMs = this.heartbeatMs + (this.ttlMs - this.heartbeatMs) / 2;
    this.shardBytes = options.shardBytes ?? 160;
    this.groupBytes = options.groupBytes ?? 1000;
    this.maxOrigins = options.maxOrigins ?? 4096;
    this.maxPodsPerOrigin = options.maxPodsPerOrigin ?? 256;
    this.maxTombstonesPerOrigin = options.maxTombstonesPerOrigin ?? 64;
    this.maxOriginsPerKey = options.maxOriginsPerKey ?? 4;
    this.maxStateBytes = options.maxStateBytes ?? Infinity;
    this.#signer = options.signer;
    this.signed = options.keyring !== undefined;
    const id = originId(this.nodeId, this.incarnation);
    this.self = newOrigin(id, this.nodeId, options.agent ?? '', this.incarnation, options.incarnation);
    if (this.#signer) {
      this.self.keyRaw = this.#signer.publicKey;
      this.#sign();
    }
    this.#lastBump = options.incarnation;
    this.#origins = new OriginTable(this.self, this.ttlMs, this.riskMs);
    this.#applier = new DeltaApplier(this.#origins, this.self, this, options.keyring, options.verify ?? verifyStamp);
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
    this.calibrationOmitted = this.#signer !== undefined && !this.#fitsWhole(next);
    if (this.calibrationOmitted)
      for (const [uid, e] of next) if (e.calibration) next.set(uid, { ...e, calibration: undefined });

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

    // Signed, every change opens a new epoch, in one version: only a whole version verifies.
    let version = this.#signer ? nextEpochStart(self.version) : self.version + 1;
    let groupUsed = 0;
    for (const c of changes) {
      c.entry.version = version;
      // A full state carries every identity, so size groups as if this one did.
      const bytes = fieldSize(entrySize(c.entry) + (c.info ? infoFieldSize(c.info) : 0));
      if (!this.#signer && groupUsed > 0 && groupUsed + bytes > this.groupBytes) {
        c.entry.version = ++version;
        groupUsed = 0;
      }
      groupUsed += bytes;
      self.pods.set(c.entry.slot, makeRecord(c.entry, c.info, c.infoVersion ?? version));
    }
    self.version = version;
    self.dataVersion = version;
    self.lastAdvance = self.lastData = this.#lastBump = now;
    this.#origins.noteData(self, now);
    evictTombstones(self, this.maxTombstonesPerOrigin, (slot) => this.#freeSlots.push(slot));
    this.#sign();
    return true;
  }

  /**
   * Whether our full state with these estimates, summaries and all, fits `maxStateBytes` (counted
   * at the largest numbers the header can carry): a signed state that does not is never sent, and
   * the pods' loads matter more than their calibration (8 pods with their identities fit 1,400
   * bytes, with their summaries not).
   */
  #fitsWhole(next: ReadonlyMap<string, PodEstimate>): boolean {
    if (this.maxStateBytes === Infinity) return true;
    const self = this.self;
    const top = 0xffffffff;
    let bytes =
      3 +
      deltaHeaderSize({
        origin: self.id,
        from: 0,
        to: top,
        ageMs: top,
        node: self.node,
        incarnation: self.incarnation,
        floor: top,
        continuesFull: false,
        agent: self.agent,
        key: new Uint8Array(PUBLIC_KEY_BYTES),
        stamp: new Uint8Array(SIGNATURE_BYTES),
      });
    for (const e of next.values()) {
      const entry = entryOf(e, 0xffff, top, this.incarnation);
      bytes += fieldSize(entrySize(entry) + infoFieldSize(infoOf(e.pod, this.nodeId)));
    }
    for (const r of self.pods.values()) if (r.entry.removed) bytes += fieldSize(r.size);
    return bytes <= this.maxStateBytes;
  }

  /** Signs our state in the epoch of our version (when we sign at all). */
  #sign(): void {
    if (!this.#signer) return;
    const self = this.self;
    self.stamp = this.#signer.sign(stampMessage(self, self.version, stateHash(self.pods)));
  }

  /** Our gossip address, once known (a socket bound to port 0 learns it late); before any full state leaves. */
  setAgent(agent: string): void {
    this.#origins.setAgent(this.self, agent);
    this.#sign(); // the stamp names the agent
  }

  /** The gossip addresses of the agents the cluster lists as live; true when what is readable changed. */
  setMembers(members: ReadonlySet<string>): boolean {
    return this.#origins.setMembers(members);
  }

  /** Advances our version if it has not moved for a heartbeat interval. */
  heartbeat(now: number): boolean {
    if (now - this.#lastBump < this.heartbeatMs) return false;
    this.self.version++;
    this.self.lastAdvance = this.#lastBump = now;
    if (this.#signer && this.self.version % EPOCH_BEATS === 0) this.#sign(); // a new epoch: a new stamp
    return true;
  }

  #allocateSlot(): number {
    return this.#freeSlots.pop() ?? this.#nextSlot++;
  }

  // --- digests (compare.ts) ------------------------------------------------------------------

  /** What we know, in at most `maxBytes`: see buildDigest. */
  digest(maxBytes: number, cursor: number, now: number): DigestWire {
    return buildDigest(this.#origins, this, maxBytes, cursor, now);
  }

  /** Compares a peer's digest (or offers) with what we hold: see compareDigest. */
  compare(digest: DigestWire, now: number, offers = false): Comparison {
    return compareDigest(this.#origins, this, digest, now, offers);
  }

  /** What to send for a peer's request (a `want` digest). */
  answer(want: DigestWire): Comparison {
    return answerWant(this.#origins, want, this.signed);
  }

  /** Adopts versions a peer says are heartbeats past data we already hold. */
  adoptHeartbeats(heartbeats: DigestWire, now: number): number {
    return adoptHeartbeats(this.#origins, heartbeats, now, this.signed);
  }

  // --- deltas ---------------------------------------------------------------------------------

  /** Applies deltas; each either applies whole and leaves its origin at exactly `to`, or not at all. */
  apply(deltas: readonly OriginDeltaWire[], now: number): ApplyResult {
    const result: ApplyResult = { dataChanged: false, advanced: 0, gaps: 0, rejected: 0, untrusted: 0 };
    for (const d of deltas) {
      if (d.ageMs >= this.ttlMs) continue; // news of an origin that is already silent too long
      const outcome = this.#applier.apply(d, now);
      if (outcome === 'gap') result.gaps++;
      else if (outcome === 'rejected') result.rejected++;
      else if (outcome === 'untrusted') result.untrusted++;
      else if (outcome !== 'stale') {
        result.advanced++;
        if (outcome === 'data') result.dataChanged = true;
      }
    }
    return result;
  }

  // --- liveness (origins.ts) ------------------------------------------------------------------

  /** Drops origins silent for longer than the TTL; returns their nodes. Notes those at risk. */
  expire(now: number): string[] {
    return this.#origins.expire(now);
  }

  // --- reading --------------------------------------------------------------------------------

  /**
   * Every pod of every readable origin (see OriginTable.readable). A pod two agents of its node
   * report (both run during a rollout's surge) is read once, from the report its agents produced
   * last: they share the node's clock, so the reports' times compare exactly.
   */
  remoteEstimates(now: number): RemoteEstimate[] {
    const out: RemoteEstimate[] = [];
    const agentsByNode = new Map<string, OriginRecord[]>();
    for (const o of this.#origins.values()) {
      if (!this.#origins.readable(o, now)) continue;
      const agents = agentsByNode.get(o.node);
      if (agents) agents.push(o);
      else agentsByNode.set(o.node, [o]);
    }
    for (const agents of agentsByNode.values()) {
      if (agents.length === 1) {
        for (const r of agents[0].pods.values()) if (!r.entry.removed) out.push(estimateOf(agents[0], r, now));
        continue;
      }
      const freshest = new Map<string, { estimate: RemoteEstimate; producedAt: number }>();
      for (const o of agents) {
        for (const r of o.pods.values()) {
          if (r.entry.removed) continue;
          const estimate = estimateOf(o, r, now);
          const producedAt = o.incarnation + r.entry.at;
          const held = freshest.get(estimate.pod.uid);
          if (held === undefined || producedAt > held.producedAt)
            freshest.set(estimate.pod.uid, { estimate, producedAt });
        }
      }
      for (const { estimate } of freshest.values()) out.push(estimate);
    }
    return out;
  }

  /** Readable origins (see OriginTable.readable). */
  origins(now: number): { origin: string; agent: string; pods: number; version: number; ageMs: number }[] {
    const out = [];
    for (const o of this.#origins.values()) {
      if (!this.#origins.readable(o, now)) continue;
      let pods = 0;
      for (const r of o.pods.values()) if (!r.entry.removed) pods++;
      out.push({ origin: o.node, agent: o.agent, pods, version: o.version, ageMs: Math.max(0, now - o.lastAdvance) });
    }
    return out;
  }

  /** The origin of the agent `agent` on `node`, readable or not. */
  origin(node: string, agent = ''): OriginRecord | undefined {
    return this.#origins.byAgent(node, agent);
  }

  /** One origin instance by node and incarnation, whichever agent address it gives. */
  instance(node: string, incarnation: number): OriginRecord | undefined {
    const o = this.#origins.get(originId(node, incarnation));
    return o?.node === node && o.incarnation === incarnation ? o : undefined;
  }

  /**
   * The key that signed one origin instance (node, incarnation), for its budget counters: held,
   * or held before (a restart replaced it); else a node's live origin's (static mode: one key per
   * node across restarts; ours for our own earlier incarnations).
   */
  keyOf(node: string, incarnation: number): KeyObject | undefined {
    const o = this.instance(node, incarnation);
    if (o?.key) return o.key;
    const former = this.#origins.formerKeys.get(`${node}#${incarnation}`);
    if (former) return former;
    if (node === this.nodeId && this.#signer) return this.#signer.key;
    for (const live of this.#origins.values()) if (live.node === node && live.key) return live.key;
    return undefined;
  }

  get size(): number {
    return this.#origins.size;
  }
}
