// Failure detection of peer agents, SWIM-style (Das, Gupta, Motivala 2002; as memberlist does):
// each period an agent pings one member in a shuffled round-robin; no ack within the direct
// timeout → it asks k other members to ping the target for it (ping-req) and relay the ack; no
// ack by the indirect timeout → the target is down. A failure seen on the request path (a peer's
// pod refused a connection) starts the same probe at once. "Down" news rides on every probe
// message and on gossip rounds, each notice a bounded number of times; an agent that hears itself
// declared down refutes it with a higher incarnation, which beats the notice everywhere.
// Pure: no sockets, no timers; the clock and randomness come in (node.ts is the shell).

export interface Notice {
  agent: string;
  /** The agent's own refutation counter: a higher one wins; at equal ones, down wins. */
  incarnation: number;
  down: boolean;
}

export type ProbeKind = 'ping' | 'ack' | 'ping-req' | 'news';

export interface ProbeMessage {
  kind: ProbeKind;
  seq: number;
  /** ping-req: the agent to ping; ack: the agent that answered. */
  target: string;
  notices: Notice[];
}

export interface ProbeOut {
  to: string;
  message: ProbeMessage;
}

export interface ProbeOptions {
  /** One member is probed per period. */
  periodMs: number;
  /** Wait for a direct ack this long before asking others. */
  directTimeoutMs: number;
  /** Wait for any ack this long after the probe started before declaring the target down. */
  indirectTimeoutMs: number;
  /** Members asked to ping a target that missed its direct ack (k). */
  indirectProbes: number;
  /** Times each notice is passed on is this times log2(members + 1), rounded up. */
  retransmitMult: number;
  /** Notices per message at most. */
  maxNotices: number;
  /** A down agent is forgotten this long after (the gossip TTL then keeps its origin out). */
  forgetDownMs: number;
}

export const DEFAULT_PROBE: ProbeOptions = {
  periodMs: 200,
  directTimeoutMs: 150,
  indirectTimeoutMs: 400,
  indirectProbes: 3,
  retransmitMult: 3,
  maxNotices: 8,
  forgetDownMs: 120_000,
};

interface Probing {
  seq: number;
  startedAt: number;
  indirect: boolean;
  /** Started by a failure on the request path: the agent's pods stay out while it runs. */
  suspected: boolean;
}

interface Relay {
  requester: string;
  requesterSeq: number;
  target: string;
  expires: number;
}

interface Held extends Notice {
  at: number;
  /** Passes left for this notice. */
  sends: number;
}

export interface ProbeStep {
  out: ProbeOut[];
  /** The set of agents out of decisions (down or suspected) changed. */
  changed: boolean;
}

export class FailureDetector {
  readonly self: string;
  readonly options: ProbeOptions;
  #members: string[] = [];
  #order: string[] = [];
  #nextProbeAt = 0;
  #seq = 0;
  #incarnation = 0;
  readonly #probing = new Map<string, Probing>();
  /**
   * The agent each probe in flight is for, by seq: acks are matched by seq, not by address, as
   * an agent's address as listed (a name, an advertised IP) need not be where its datagrams come from.
   */
  readonly #probeFor = new Map<number, string>();
  readonly #relays = new Map<number, Relay>();
  readonly #held = new Map<string, Held>();
  /** When an agent held down was last told so. */
  readonly #told = new Map<string, number>();
  /** Counters for views and the bench. */
  readonly counters = { probes: 0, indirect: 0, declaredDown: 0, refuted: 0 };

  constructor(self: string, options: Partial<ProbeOptions> = {}) {
    this.self = self;
    this.options = { ...DEFAULT_PROBE, ...options };
  }

  /** The other agents (gossip addresses); probes go only to them. */
  setMembers(members: readonly string[]): void {
    this.#members = members.filter((m) => m !== this.self);
    const live = new Set(this.#members);
    this.#order = this.#order.filter((m) => live.has(m));
    for (const agent of this.#probing.keys()) if (!live.has(agent)) this.#endProbe(agent);
  }

  /** Whether the agent's pods should be out of decisions now: declared down, or suspected and being probed. */
  isOut(agent: string): boolean {
    return this.#held.get(agent)?.down === true || this.#probing.get(agent)?.suspected === true;
  }

  /** Agents out of decisions now (see isOut). */
  outAgents(): Set<string> {
    const out = new Set<string>();
    for (const [agent, n] of this.#held) if (n.down) out.add(agent);
    for (const [agent, p] of this.#probing) if (p.suspected) out.add(agent);
    return out;
  }

  /** A failure on the request path points at this agent: probe it now, and keep its pods out meanwhile. */
  suspect(agent: string, now: number): ProbeStep {
    if (agent === this.self || !this.#members.includes(agent) || this.#held.get(agent)?.down)
      return { out: [], changed: false };
    const running = this.#probing.get(agent);
    if (running) {
      const changed = !running.suspected;
      running.suspected = true;
      return { out: [], changed };
    }
    return { out: [this.#startProbe(agent, now, true)], changed: true };
  }

  /** Once in a while (at least every period): start the period's probe, move timed-out ones on, expire. */
  tick(now: number, rand: () => number): ProbeStep {
    const out: ProbeOut[] = [];
    let changed = false;
    for (const [agent, p] of this.#probing) {
      if (!p.indirect && now - p.startedAt >= this.options.directTimeoutMs) {
        p.indirect = true;
        this.counters.indirect++;
        for (const helper of this.#pick(this.options.indirectProbes, rand, agent)) {
          out.push({ to: helper, message: this.#message('ping-req', p.seq, agent) });
        }
      } else if (p.indirect && now - p.startedAt >= this.options.indirectTimeoutMs) {
        this.#endProbe(agent);
        this.#declare({ agent, incarnation: this.#held.get(agent)?.incarnation ?? 0, down: true }, now);
        this.counters.declaredDown++;
        changed = true;
      }
    }
    for (const [seq, r] of this.#relays) if (now >= r.expires) this.#relays.delete(seq);
    for (const [agent, n] of this.#held) {
      if (now - n.at >= this.options.forgetDownMs) {
        this.#held.delete(agent);
        this.#told.delete(agent);
        if (n.down) changed = true;
      }
    }
    if (now >= this.#nextProbeAt) {
      this.#nextProbeAt = now + this.options.periodMs;
      const target = this.#nextTarget(rand);
      if (target !== undefined && !this.#probing.has(target)) out.push(this.#startProbe(target, now, false));
    }
    return { out, changed };
  }

  /** A probe message from `from` (its gossip address). */
  receive(from: string, message: ProbeMessage, now: number): ProbeStep {
    const out: ProbeOut[] = [];
    let changed = this.#heardFrom(from, now, out);
    for (const n of message.notices) changed = this.#apply(n, now) || changed;
    switch (message.kind) {
      case 'ping':
        out.push({ to: from, message: this.#message('ack', message.seq, this.self) });
        break;
      case 'ping-req': {
        if (message.target === this.self || message.target === from) break;
        const seq = this.#nextSeq();
        this.#relays.set(seq, {
          requester: from,
          requesterSeq: message.seq,
          target: message.target,
          expires: now + this.options.indirectTimeoutMs,
        });
        out.push({ to: message.target, message: this.#message('ping', seq, '') });
        break;
      }
      case 'ack': {
        const relay = this.#relays.get(message.seq);
        if (relay) {
          this.#relays.delete(message.seq);
          out.push({ to: relay.requester, message: this.#message('ack', relay.requesterSeq, relay.target) });
          break;
        }
        const answered = this.#probeFor.get(message.seq);
        const p = answered === undefined ? undefined : this.#probing.get(answered);
        if (answered !== undefined && p?.seq === message.seq) {
          this.#endProbe(answered);
          if (p.suspected) changed = true;
        }
        break;
      }
      case 'news':
        break;
    }
    return { out, changed };
  }

  /**
   * Any datagram straight from an agent: it is alive now, whatever a probe in flight thought. One
   * we hold down is told so (once a period), so that it refutes the notice if it is alive.
   */
  heard(from: string, now: number): ProbeStep {
    const out: ProbeOut[] = [];
    const changed = this.#heardFrom(from, now, out);
    return { out, changed };
  }

  /** Notices to pass on with a gossip round's datagram (each pass counts against its retransmits). */
  news(): Notice[] {
    return this.#notices();
  }

  #heardFrom(from: string, now: number, out: ProbeOut[]): boolean {
    const held = this.#held.get(from);
    if (held?.down && now - (this.#told.get(from) ?? -Infinity) >= this.options.periodMs) {
      this.#told.set(from, now);
      out.push({
        to: from,
        message: {
          kind: 'news',
          seq: 0,
          target: '',
          notices: [{ agent: held.agent, incarnation: held.incarnation, down: true }],
        },
      });
    }
    const p = this.#probing.get(from);
    if (!p) return false;
    this.#endProbe(from);
    return p.suspected;
  }

  #endProbe(agent: string): void {
    const p = this.#probing.get(agent);
    if (!p) return;
    this.#probing.delete(agent);
    this.#probeFor.delete(p.seq);
  }

  #startProbe(agent: string, now: number, suspected: boolean): ProbeOut {
    const seq = this.#nextSeq();
    this.#probing.set(agent, { seq, startedAt: now, indirect: false, suspected });
    this.#probeFor.set(seq, agent);
    this.counters.probes++;
    return { to: agent, message: this.#message('ping', seq, '') };
  }

  /** Applies a notice; true when the set of down agents changed. Notices about us are refuted. */
  #apply(n: Notice, now: number): boolean {
    if (n.agent === this.self) {
      if (n.down && n.incarnation >= this.#incarnation) {
        this.#incarnation = n.incarnation + 1;
        this.counters.refuted++;
        this.#declare({ agent: this.self, incarnation: this.#incarnation, down: false }, now);
      }
      return false;
    }
    const held = this.#held.get(n.agent);
    const newer =
      !held || n.incarnation > held.incarnation || (n.incarnation === held.incarnation && n.down && !held.down);
    if (!newer) return false;
    const wasOut = this.isOut(n.agent);
    this.#declare(n, now);
    if (n.down) this.#endProbe(n.agent);
    return wasOut !== this.isOut(n.agent);
  }

  #declare(n: Notice, now: number): void {
    const sends = Math.ceil(this.options.retransmitMult * Math.log2(this.#members.length + 2));
    this.#held.set(n.agent, { ...n, at: now, sends });
  }

  #message(kind: ProbeKind, seq: number, target: string): ProbeMessage {
    return { kind, seq, target, notices: this.#notices() };
  }

  #notices(): Notice[] {
    const out: Notice[] = [];
    for (const n of this.#held.values()) {
      if (n.sends <= 0) continue;
      n.sends--;
      out.push({ agent: n.agent, incarnation: n.incarnation, down: n.down });
      if (out.length >= this.options.maxNotices) break;
    }
    return out;
  }

  #nextSeq(): number {
    this.#seq = (this.#seq + 1) >>> 0 || 1;
    return this.#seq;
  }

  /** Shuffled round-robin over the members (SWIM's bounded time to first probe), skipping the down. */
  #nextTarget(rand: () => number): string | undefined {
    for (let tries = 0; tries < 2; tries++) {
      while (this.#order.length > 0) {
        const next = this.#order.pop()!;
        if (!this.#held.get(next)?.down) return next;
      }
      this.#order = [...this.#members];
      for (let i = this.#order.length - 1; i > 0; i--) {
        const j = Math.floor(rand() * (i + 1));
        [this.#order[i], this.#order[j]] = [this.#order[j], this.#order[i]];
      }
    }
    return undefined;
  }

  /** Up to `k` random members other than `not` and the down ones. */
  #pick(k: number, rand: () => number, not: string): string[] {
    const pool = this.#members.filter((m) => m !== not && !this.#held.get(m)?.down);
    const out: string[] = [];
    while (out.length < k && pool.length > 0) out.push(pool.splice(Math.floor(rand() * pool.length), 1)[0]);
    return out;
  }
}
