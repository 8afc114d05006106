// Budget counters over gossip: one agent's side of the anti-entropy exchange (scuttlebutt), on
// the ledger's plain data and the budget wire format. Pure: no sockets, no timers. Gossip's node
// carries the bytes in its Payload's `budget` field (agent/gossip/node.ts); bench/budget.ts
// drives this same code in virtual time.
//
// Every round, to each peer gossip picked: ask = {digest (all origins held, or one shard of them
// when that does not fit a datagram), this agent's own counters (a push: the freshest news, and
// only we have it first)}. The peer merges the push and answers with what the asker lacks, plus
// a "send me" digest of what the asker listed newer; the asker answers that with deltas. An
// answer is never answered with a digest, so every exchange ends.
//
// Fair delta scheduling: when an answer cannot carry everything the asker lacks (a burst: every
// agent's counters change every round), it serves our own origin first (nobody else has its
// latest) and then the origins the asker is furthest behind on, so every origin's news gets
// through instead of the first ones in a fixed order starving the rest.
//
// Sync: a new agent (a new origin, after a restart too) must not admit as if the window were
// empty. It is synced once, for every shard of the origin space, some peer answered without
// cutting anything: it then sees at least what that peer saw (see BudgetLedger.markSynced).
import type { BudgetLedger, Counter } from './ledger.ts';
import { counterMessage, headMessage, instanceOf, verifies, type CounterKeys } from './signing.ts';
import {
  budgetOriginId,
  cutDelta,
  decodeBudgetGossip,
  digestBytes,
  encodeBudgetGossip,
  MAX_SHARDS,
  type BudgetDeltaWire,
  type BudgetDigestWire,
  type BudgetGossipWire,
} from './wire.ts';

export interface BudgetExchangeOptions {
  ledger: BudgetLedger;
  /** Datagrams one answer may span; what does not fit waits for a later round. */
  maxMessagesPerAnswer: number;
  /** Rotate which origins a cut answer serves first (default true); false: a fixed order (bench:budget's "before"). */
  fair?: boolean;
  /**
   * Counters must be signed by their origin (agent/budget/signing.ts), with the keys gossip passes
   * each round: a delta with any counter not so signed is refused whole. Until the first round,
   * every delta is refused.
   */
  signed?: boolean;
}

/** The sync coverage's resolution: shards of the origin id space (a digest names at most this many). */
const COVERAGE = 4096;
/** An ask's digest takes at most this part of a datagram; the rest carries our own counters. */
const DIGEST_SHARE = 0.6;
/** A message's flags and shard echo, at most. */
const FLAG_BYTES = 18;

interface Candidate {
  origin: string;
  id: number;
  held: number;
  version: number;
}

/** Origins of one node held at once when the earlier ones are taken on the word of its live one. */
const MAX_EARLIER_PER_NODE = 4;

/** Whether a ledger origin (`node#incarnation`) is a gossip origin instance alive now. */
function aliveOrigin(origin: string, alive: (node: string, incarnation: number) => boolean): boolean {
  const cut = origin.lastIndexOf('#');
  return cut > 0 && alive(origin.slice(0, cut), Number(origin.slice(cut + 1)));
}

export class BudgetExchange {
  readonly #o: BudgetExchangeOptions;
  readonly #ledger: BudgetLedger;
  /** The datagram room of the call at hand (the gossip shell knows its envelope's size). */
  #maxBytes = 0;
  #shardCursor = 0;
  readonly #covered = new Uint8Array(COVERAGE);
  #coveredCount = 0;
  /** The sweep under way: shards answered in full since the last sweep completed. */
  readonly #sweep = new Uint8Array(COVERAGE);
  #sweepCount = 0;
  /** Full sweeps completed: every shard answered in full again (the ledger's slow start counts them). */
  sweeps = 0;
  #ids: { versions: ReadonlyMap<string, number>; byId: ReadonlyMap<number, string> } | undefined;
  /** Agents alive as gossip sees them, this one included (the ledger's slow start). */
  agents = 1;
  /** Deltas refused because a counter or the version they end at was not signed by their origin. */
  unsigned = 0;
  /** Signatures made (our counters and heads) and checked (others'): the cost bench:budget reports. */
  readonly signatures = { made: 0, checked: 0 };
  #keys: CounterKeys | undefined;
  #ownHead: { version: number; signature: Uint8Array } | undefined;

  constructor(options: BudgetExchangeOptions) {
    this.#o = options;
    this.#ledger = options.ledger;
  }

  /**
   * Once a gossip round: membership from gossip (how many agents; which origins are alive, so
   * their pending reservations keep counting however long they run), and ended windows dropped.
   * An origin is named `node#incarnation` after its agent's gossip origin (agent/agent.ts).
   */
  round(agentsAlive: number, alive?: (node: string, incarnation: number) => boolean, keys?: CounterKeys): void {
    this.agents = Math.max(1, agentsAlive);
    this.#alive = alive;
    this.#keys = keys;
    if (!alive) return this.#ledger.prune();
    for (const origin of this.#ledger.versions().keys()) {
      const cut = origin.lastIndexOf('#');
      if (cut > 0 && alive(origin.slice(0, cut), Number(origin.slice(cut + 1)))) this.#ledger.heard(origin);
    }
    this.#ledger.prune();
  }

  /** The ask for one peer this round, at most `maxBytes`; undefined when there is nothing to say (no counters anywhere, and synced). */
  ask(maxBytes: number): Uint8Array | undefined {
    this.#maxBytes = maxBytes;
    const ledger = this.#ledger;
    if (ledger.synced && ledger.size.counters === 0) return undefined;
    const held = [...ledger.versions()].map(([origin, version]) => ({ origin, id: budgetOriginId(origin), version }));
    const digest = this.#digestFor(held);
    const message: BudgetGossipWire = { digest, deltas: [], syncing: !ledger.synced };
    const room = this.#maxBytes - FLAG_BYTES - digestBytes(digest.versions.values(), digest.versions.size);
    const own = ledger.origin;
    const version = ledger.versions().get(own) ?? 0;
    const counters = this.#signOwn(ledger.deltaSince(own, 0));
    const push = cutDelta(own, 0, version, counters, room, new Set(), this.#headOf(own, version));
    if (push && push.delta.counters.length > 0) message.deltas.push(push.delta);
    return encodeBudgetGossip(message);
  }

  /**
   * A peer's message: merge what it carries and return the answers to send back, each at most
   * `maxBytes`. Throws BudgetWireError when malformed (the caller counts it and drops the datagram).
   */
  receive(bytes: Uint8Array, maxBytes: number): Uint8Array[] {
    this.#maxBytes = maxBytes;
    const message = decodeBudgetGossip(bytes, (id) => this.#byId().get(id));
    let refused = false;
    for (const d of message.deltas) {
      // Only an origin gossip holds (signed by its own agent) may have counters: made-up origins
      // would otherwise fill the store and push out real agents' spending.
      if (
        this.#alive &&
        !this.#ledger.versions().has(d.origin) &&
        !aliveOrigin(d.origin, this.#alive) &&
        !this.#earlierOfLive(d.origin, this.#alive)
      ) {
        refused = true;
        this.#ledger.refuse(d.counters.length);
      } else if (this.#o.signed && d.origin !== this.#ledger.origin && !this.#signedByOrigin(d)) {
        // Before our first round we know no key: later we may. A key never known (an incarnation
        // we never met) is no reason to wait: peers will always send those counters.
        refused ||= this.#keys === undefined;
        this.unsigned++;
        this.#ledger.refuse(d.counters.length);
      } else this.#ledger.merge(d.origin, d.from, d.to, d.counters, d.head);
    }
    if (!message.answer) return message.digest ? this.#answer(message.digest, message.syncing ?? false) : [];
    // Complete only if we could take all of it: an answer whose deltas we refused for now (an
    // origin gossip does not hold yet, no keys yet) does not make us see what the answerer saw.
    if (message.complete && !refused) this.#cover(message.shard ?? 0, message.shards ?? 0);
    if (!message.digest || message.digest.versions.size === 0) return [];
    // "Send me": deltas for exactly the origins listed, from the versions listed.
    const wanted = message.digest.versions;
    const candidates = this.#candidates((id) => wanted.has(id), wanted);
    return this.#pack(candidates, { answer: true, deltas: [] }).messages;
  }

  /**
   * An earlier incarnation of an agent whose current one is held and alive (ourselves included:
   * gossip never holds our own old origin): its spend in this window still counts after a
   * restart. At most a few per node, so made-up incarnations cannot fill the store.
   */
  #earlierOfLive(origin: string, alive: (node: string, incarnation: number) => boolean): boolean {
    const cut = origin.lastIndexOf('#');
    if (cut <= 0) return false;
    const node = origin.slice(0, cut + 1);
    const incarnation = Number(origin.slice(cut + 1));
    let vouched = false;
    let held = 0;
    for (const o of this.#ledger.versions().keys()) {
      if (!o.startsWith(node) || o.indexOf('#', node.length) >= 0) continue;
      held++;
      const later = Number(o.slice(node.length)) > incarnation;
      if (later && (o === this.#ledger.origin || aliveOrigin(o, alive))) vouched = true;
    }
    return vouched && held < MAX_EARLIER_PER_NODE;
  }

  /**
   * Every counter signed by the delta's origin, and its end version backed by a counter or a head
   * signature. Counters already held (an origin pushes all of its own every round) are not
   * checked again: merge skips them, and a version not past the one held moves nothing.
   */
  #signedByOrigin(d: BudgetDeltaWire): boolean {
    const instance = instanceOf(d.origin);
    const key = instance && this.#keys?.of(instance.node, instance.incarnation);
    if (!key) return false;
    for (const c of d.counters) {
      if (this.#ledger.holds(d.origin, c)) continue;
      this.signatures.checked++;
      if (!verifies(key, counterMessage(d.origin, c), c.signature)) return false;
    }
    if (d.to <= (this.#ledger.versions().get(d.origin) ?? 0) || d.counters.some((c) => c.version === d.to)) return true;
    this.signatures.checked++;
    return verifies(key, headMessage(d.origin, d.to), d.head);
  }

  /** Our own counters, each signed once per change (bump() drops a counter's signature). */
  #signOwn(counters: Counter[]): Counter[] {
    const keys = this.#keys;
    if (!this.#o.signed || !keys) return counters;
    for (const c of counters) {
      if (c.signature) continue;
      c.signature = keys.sign(counterMessage(this.#ledger.origin, c));
      this.signatures.made++;
    }
    return counters;
  }

  /**
   * Signed mode: what backs a delta of `origin` ending at `version` past its last counter (our
   * head signature, or the one held with a relayed origin's version; `{}`: none, so the delta
   * ends at its last counter). Unsigned: undefined.
   */
  #headOf(origin: string, version: number): { head?: Uint8Array } | undefined {
    if (!this.#o.signed) return undefined;
    if (origin !== this.#ledger.origin) return { head: this.#ledger.head(origin) };
    if (!this.#keys) return {};
    if (this.#ownHead?.version !== version) {
      this.#ownHead = { version, signature: this.#keys.sign(headMessage(origin, version)) };
      this.signatures.made++;
    }
    return { head: this.#ownHead.signature };
  }

  /** Which gossip origin instances are alive, as of the last round (absent: not riding on gossip). */
  #alive: ((node: string, incarnation: number) => boolean) | undefined;

  /** The origins held by id (deltas after version 0 carry only the id), built once per ledger revision. */
  #byId(): ReadonlyMap<number, string> {
    const versions = this.#ledger.versions();
    if (this.#ids?.versions !== versions)
      this.#ids = { versions, byId: new Map([...versions.keys()].map((o) => [budgetOriginId(o), o])) };
    return this.#ids.byId;
  }

  /** Has every shard of the origin space been answered in full by some peer? */
  get synced(): boolean {
    return this.#coveredCount === COVERAGE;
  }

  #answer(digest: BudgetDigestWire, syncing: boolean): Uint8Array[] {
    const inShard = shardTest(digest.shard, digest.shards);
    const candidates = this.#candidates(inShard, digest.versions);
    // What the asker listed newer than we hold: ask for it back (push-pull).
    const ours = this.#ledger.versions();
    const names = this.#byId();
    const want = new Map<number, number>();
    const wantRoom = this.#maxBytes / 3;
    for (const [id, theirs] of digest.versions) {
      const name = names.get(id);
      const mine = name === undefined ? 0 : ours.get(name)!;
      if (theirs > mine && id !== budgetOriginId(this.#ledger.origin)) {
        want.set(id, mine);
        if (digestBytes(want.values(), want.size) > wantRoom) {
          want.delete(id);
          break;
        }
      }
    }
    const first: BudgetGossipWire = {
      answer: true,
      deltas: [],
      shard: digest.shard,
      shards: digest.shards,
      ...(want.size ? { digest: { versions: want, shard: 0, shards: 0 } } : {}),
    };
    return this.#pack(candidates, first, syncing || want.size > 0).messages;
  }

  /** Origins in scope that we hold newer than `held` says (absent: the holder has none of it). */
  #candidates(inScope: (id: number) => boolean, held: ReadonlyMap<number, number>): Candidate[] {
    const out: Candidate[] = [];
    for (const [origin, version] of this.#ledger.versions()) {
      const id = budgetOriginId(origin);
      if (!inScope(id)) continue;
      const theirs = held.get(id) ?? 0;
      if (version > theirs) out.push({ origin, id, held: theirs, version });
    }
    if (this.#o.fair === false) return out;
    // Our own origin first (nobody else has its latest), then the ones the asker is furthest
    // behind on: an origin passed over in one answer is further behind in the next, so it goes
    // sooner (oldest news first, without remembering anything per asker).
    const own = this.#ledger.origin;
    const key = (c: Candidate) => (c.origin === own ? -Infinity : c.held - c.version);
    return out.sort((a, b) => key(a) - key(b));
  }

  /**
   * Deltas for `candidates` in order, into up to maxMessagesPerAnswer messages, the first one
   * being `first` (its digest and echo already set). `always`: send the first message even when
   * it carries nothing (the asker needs the verdict). Complete: nothing was cut; the first
   * message says so.
   */
  #pack(
    candidates: Candidate[],
    first: BudgetGossipWire,
    always = false,
  ): { messages: Uint8Array[]; complete: boolean } {
    const out: BudgetGossipWire[] = [first];
    let room =
      this.#maxBytes -
      FLAG_BYTES -
      (first.digest ? digestBytes(first.digest.versions.values(), first.digest.versions.size) : 0);
    let names = new Set<string>();
    let served = 0;
    outer: for (const c of candidates) {
      let from = c.held;
      let rest = this.#ledger.deltaSince(c.origin, from);
      if (c.origin === this.#ledger.origin) rest = this.#signOwn(rest);
      const head = this.#headOf(c.origin, c.version);
      if (head && !head.head && rest.length === 0) {
        served++; // nothing this replica can back: the origin itself will send its head
        continue;
      }
      for (;;) {
        const current = out.at(-1)!;
        const cut = cutDelta(c.origin, from, c.version, rest, room, names, head);
        if (cut) {
          current.deltas.push(cut.delta);
          room -= cut.bytes;
          if (cut.delta.counters.length === rest.length) break;
          rest = rest.slice(cut.delta.counters.length);
          from = cut.delta.to;
        } else if (current.deltas.length === 0 && out.length > 1) {
          break outer; // not even one counter fits an empty datagram (cannot happen with real sizes)
        }
        // The datagram is full: the rest of this origin continues in the next one, if any.
        if (out.length >= this.#o.maxMessagesPerAnswer) break outer;
        out.push({ answer: true, deltas: [] });
        room = this.#maxBytes - FLAG_BYTES;
        names = new Set();
      }
      served++;
    }
    const complete = served === candidates.length;
    if (complete) first.complete = true;
    const messages = out
      .filter((m, i) => m.deltas.length > 0 || (i === 0 && (always || m.digest !== undefined)))
      .map((m) => encodeBudgetGossip(m));
    return { messages, complete };
  }

  /**
   * The digest of an ask: every origin held, or shard `cursor` of the fewest shards that each
   * fit (one shard count for every shard, so successive asks cover the whole id space).
   */
  #digestFor(held: { id: number; version: number }[]): BudgetDigestWire {
    const room = this.#maxBytes * DIGEST_SHARE;
    const fits = (entries: { version: number }[]) =>
      digestBytes(
        entries.map((e) => e.version),
        entries.length,
      ) <= room;
    if (fits(held)) return { versions: new Map(held.map((e) => [e.id, e.version])), shard: 0, shards: 0 };
    const cursor = this.#shardCursor++;
    for (let shards = 2; shards <= COVERAGE; shards *= 2) {
      const members: { id: number; version: number }[][] = Array.from({ length: shards }, () => []);
      for (const e of held) members[shardOf(e.id, shards)].push(e);
      if (!members.every(fits)) continue;
      const shard = this.#ledger.synced ? cursor % shards : this.#uncovered(cursor, shards);
      return { versions: new Map(members[shard].map((e) => [e.id, e.version])), shard, shards };
    }
    // Unreachable with maxOrigins far below COVERAGE × a datagram's entries; an empty shard claim is still true.
    return { versions: new Map(), shard: cursor % COVERAGE, shards: COVERAGE };
  }

  /** Not yet synced: the next shard from `cursor` on that no peer has answered in full yet. */
  #uncovered(cursor: number, shards: number): number {
    const width = COVERAGE / shards;
    for (let k = 0; k < shards; k++) {
      const shard = (cursor + k) % shards;
      if (this.#covered.subarray(shard * width, (shard + 1) * width).includes(0)) return shard;
    }
    return cursor % shards;
  }

  #cover(shard: number, shards: number): void {
    if (shards > COVERAGE) return;
    const width = shards === 0 ? COVERAGE : COVERAGE / shards;
    const start = shards === 0 ? 0 : shard * width;
    for (let i = start; i < start + width; i++) {
      if (!this.#covered[i]) {
        this.#covered[i] = 1;
        this.#coveredCount++;
      }
      if (!this.#sweep[i]) {
        this.#sweep[i] = 1;
        this.#sweepCount++;
      }
    }
    if (this.synced) this.#ledger.markSynced();
    if (this.#sweepCount === COVERAGE) {
      this.sweeps++;
      this.#sweep.fill(0);
      this.#sweepCount = 0;
    }
  }
}

/** The shard of `shards` (a power of two) an origin id falls in: its top bits. */
const shardOf = (id: number, shards: number): number => Math.floor(id / (2 ** 32 / shards));

/** Whether an origin id falls in shard `shard` of `shards`; every id when shards is 0. */
function shardTest(shard: number, shards: number): (id: number) => boolean {
  if (shards === 0) return () => true;
  const n = Math.min(shards, MAX_SHARDS);
  return (id) => shardOf(id, n) === shard;
}
