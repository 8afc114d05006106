// One agent's side of the gossip protocol, without sockets: what to send each round and what to
// answer to what arrives. The UDP shell (node.ts) and the simulated network of bench/gossip.ts
// drive this same code.
//
// An exchange: every round A sends a digest to `fanout` random peers; B answers with the deltas
// A lacks, heartbeat versions A can adopt, offers of B's news A did not mention, and a `want`
// for what A knows newer; A answers the `want` with deltas (and B's offers with a want, which B
// answers with deltas). Only a digest is answered with offers, so every exchange ends.
import type { PodEstimate } from '../types.ts';
import { emptyComparison, type Comparison, type Send } from './compare.ts';
import { GossipState, type GossipStateOptions } from './state.ts';
import { encodePayload, type DigestWire, type PayloadWire } from './wire.ts';
import { digestSize, fieldSize } from './wire-size.ts';
import { writeDelta } from './packing.ts';

export interface ProtocolOptions extends GossipStateOptions {
  fanout?: number;
  /** Largest encoded payload of one datagram (the datagram limit less the envelope). */
  maxPayload: number;
  /** An answer spans at most this many datagrams; the rest waits for a later round. */
  maxDatagramsPerReply?: number;
}

export interface Outgoing {
  to: string;
  payload: Uint8Array;
}

export interface StepResult {
  out: Outgoing[];
  /** Remote pods appeared, changed or went. */
  dataChanged: boolean;
  /** Only origins' liveness moved (so did the ages of their estimates). */
  livenessChanged: boolean;
}

export interface ProtocolCounters {
  /** Deltas that did not follow on from the version held (a datagram before them was lost). */
  gaps: number;
  /** Deltas refused (our own origin, an id not matching its node, over a limit). */
  rejected: number;
  /** Origins dropped after their TTL. */
  expired: number;
  /** Deltas refused: not signed by a key trusted for their origin's node, or not verifying. */
  untrusted: number;
}

export class GossipProtocol {
  readonly state: GossipState;
  readonly fanout: number;
  readonly maxPayload: number;
  readonly maxDatagramsPerReply: number;
  readonly counters: ProtocolCounters = { gaps: 0, rejected: 0, expired: 0, untrusted: 0 };
  #peers: string[] = [];
  #pending: readonly PodEstimate[] | undefined;
  #cursor = 0;

  constructor(options: ProtocolOptions) {
    this.state = new GossipState({ maxStateBytes: options.maxPayload, ...options });
    this.fanout = options.fanout ?? 3;
    this.maxPayload = options.maxPayload;
    this.maxDatagramsPerReply = options.maxDatagramsPerReply ?? 4;
  }

  setPeers(peers: readonly string[]): void {
    this.#peers = [...new Set(peers)];
  }

  /** Takes effect at the next round: our version moves at most once a round. */
  publishLocal(estimates: readonly PodEstimate[]): void {
    this.#pending = estimates;
  }

  tick(now: number, rand: () => number): StepResult {
    const expired = this.state.expire(now);
    this.counters.expired += expired.length;
    if (this.#pending) {
      this.state.localUpdate(this.#pending, now);
      this.#pending = undefined;
    }
    this.state.heartbeat(now);
    const out: Outgoing[] = [];
    const peers = pick(this.#peers, this.fanout, rand);
    for (const to of peers) {
      // Each peer gets the next shard, so a round covers `fanout` shards of a large cluster.
      const digest = this.state.digest(this.maxPayload - 3, this.#cursor++, now);
      out.push({ to, payload: encodePayload({ digest, deltas: [] }) });
    }
    return { out, dataChanged: expired.length > 0, livenessChanged: false };
  }

  receive(from: string, payload: PayloadWire, now: number): StepResult {
    let dataChanged = false;
    let advanced = 0;
    if (payload.deltas.length) {
      const applied = this.state.apply(payload.deltas, now);
      this.counters.gaps += applied.gaps;
      this.counters.rejected += applied.rejected;
      this.counters.untrusted += applied.untrusted;
      dataChanged = applied.dataChanged;
      advanced += applied.advanced;
    }
    if (payload.heartbeats) advanced += this.state.adoptHeartbeats(payload.heartbeats, now);
    const reply = emptyComparison();
    for (const [digest, offers] of [
      [payload.digest, false],
      [payload.offers, true],
    ] as const) {
      if (!digest) continue;
      const c = this.state.compare(digest, now, offers);
      advanced += c.adopted;
      merge(reply, c);
    }
    if (payload.want) merge(reply, this.state.answer(payload.want));
    return { out: this.#pack(from, reply, now), dataChanged, livenessChanged: advanced > 0 && !dataChanged };
  }

  /** The answer as datagram payloads: small digests first, then deltas, freshest first. */
  #pack(to: string, reply: Comparison, now: number): Outgoing[] {
    const out: Outgoing[] = [];
    let current: PayloadWire = { deltas: [] };
    let used = 0;
    const flush = (): boolean => {
      if (used > 0) out.push({ to, payload: encodePayload(current) });
      current = { deltas: [] };
      used = 0;
      return out.length < this.maxDatagramsPerReply;
    };
    for (const field of ['heartbeats', 'want', 'offers'] as const) {
      const source = reply[field];
      if (source.origins.length === 0) continue;
      const d = fitDigest(source, this.maxPayload - used);
      if (d === undefined) continue;
      current[field] = d;
      used += fieldSize(digestSize(d));
    }
    const sends = orderSends(reply.sends, now, this.state.hotMs);
    outer: for (const s of sends) {
      if (s.origin.version <= s.since) continue; // it advanced no further meanwhile
      let since = s.since;
      let continuesFull = false;
      for (;;) {
        const written = writeDelta(s.origin, since, this.maxPayload - used, now, continuesFull);
        if (written === undefined) {
          if (used === 0) break; // cannot fit even an empty datagram: skip this origin
          if (!flush()) break outer;
          continue;
        }
        current.deltas.push(written.delta);
        used += written.fieldSize;
        if (written.done) break;
        // The rest of this origin goes next, from where this part ends: version order, no gap.
        continuesFull = written.delta.from === 0 || written.delta.continuesFull;
        since = written.delta.to;
        if (!flush()) break outer;
      }
    }
    flush();
    return out;
  }
}

function merge(into: Comparison, c: Comparison): void {
  into.sends.push(...c.sends);
  for (const key of ['want', 'heartbeats', 'offers'] as const) {
    into[key].origins.push(...c[key].origins);
    into[key].versions.push(...c[key].versions);
    into[key].dataLag.push(...c[key].dataLag);
  }
}

/** Fresh data first, then other increments, then full states (large, and least urgent). */
function orderSends(sends: Send[], now: number, hotMs: number): Send[] {
  const rank = (s: Send) => (s.since === 0 ? 2 : now - s.origin.lastData <= hotMs ? 0 : 1);
  return sends
    .map((s) => ({ s, r: rank(s) }))
    .sort((a, b) => a.r - b.r)
    .map((x) => x.s);
}

/** The digest, or as much of it as fits `maxBytes` as a payload field. */
function fitDigest(d: DigestWire, maxBytes: number): DigestWire | undefined {
  let n = d.origins.length;
  const cut = (k: number): DigestWire => ({
    origins: d.origins.slice(0, k),
    versions: d.versions.slice(0, k),
    dataLag: d.dataLag.slice(0, d.dataLag.length ? k : 0),
    shard: 0,
    shards: 0,
  });
  while (n > 0) {
    const candidate = n === d.origins.length ? d : cut(n);
    if (fieldSize(digestSize(candidate)) <= maxBytes) return candidate;
    n = Math.floor(n * 0.8);
  }
  return undefined;
}

/** Up to k distinct peers, uniformly at random (partial Fisher-Yates). */
function pick(peers: readonly string[], k: number, rand: () => number): string[] {
  if (peers.length > 4 * k) {
    // Large peer sets: rejection sampling, without copying the list every round.
    const chosen = new Set<string>();
    while (chosen.size < k) chosen.add(peers[Math.floor(rand() * peers.length)]);
    return [...chosen];
  }
  const pool = [...peers];
  const n = Math.min(k, pool.length);
  for (let i = 0; i < n; i++) {
    const j = i + Math.floor(rand() * (pool.length - i));
    [pool[i], pool[j]] = [pool[j], pool[i]];
  }
  return pool.slice(0, n);
}
