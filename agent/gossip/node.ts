// The gossip shell: one UDP socket, one round timer, and the envelope around the pure protocol.
// Everything it decides, it asks protocol.ts; everything it counts, stats() shows.
import { createSocket, type RemoteInfo, type Socket } from 'node:dgram';
import { isIPv6 } from 'node:net';
import type { ClockAndRandom, PodEstimate } from '../types.ts';
import { bindingOnly, bindingPayload, MAX_BINDING_DATAGRAM, type BindingChannel } from './binding.ts';
import { DROP_REASONS, Opener, Sealer, type DropReason } from './envelope.ts';
import { GossipProtocol, type Outgoing } from './protocol.ts';
import { FailureDetector, type ProbeOptions, type ProbeStep } from './probe.ts';
import type { Keyring, OriginSigner } from './signatures.ts';
import { SourceGate } from './source-gate.ts';
import type { GossipRider } from './rider.ts';
import type { GossipStateOptions, RemoteEstimate } from './state.ts';
import { decodePayload, encodePayload } from './wire.ts';
import { envelopeOverhead } from './wire-size.ts';

export interface GossipNodeOptions extends ClockAndRandom {
  /** This agent's node name: the origin of the pods it publishes. */
  nodeId: string;
  /** UDP `host:port` to listen on (port 0: any free port; see address()). */
  bind: string;
  /** Other agents' gossip `host:port`s. */
  peers: readonly string[];
  /**
   * This agent's gossip address as its peers list it (Kubernetes: pod IP and port); default:
   * the bound address, unless bound to a wildcard. Names our origin, with the node.
   */
  advertise?: string;
  /** Cluster HMAC key, shared by all agents. */
  key: Buffer;
  intervalMs?: number;
  fanout?: number;
  /** Backstop: an origin silent this long is dropped even if membership still lists its agent. */
  ttlMs?: number;
  /** Advance our version at least this often when nothing changes; default ttlMs / 3. */
  heartbeatMs?: number;
  maxDatagram?: number;
  /** Datagrams whose sender clock differs from ours by more than this are dropped as stale. */
  maxClockSkewMs?: number;
  maxDatagramsPerReply?: number;
  /** Datagrams per second accepted from one source address (default 200); more are dropped unread. */
  maxDatagramsPerSecondPerSource?: number;
  /** Our origin instance (ms); default: now at construction. Other state naming its origin after it can share it. */
  incarnation?: number;
  /** Another state carried in gossip's datagrams (the overflow budget counters), in Payload.budget. */
  rider?: GossipRider;
  /** Failure detection of peer agents (agent/gossip/probe.ts); default DEFAULT_PROBE. */
  probe?: Partial<ProbeOptions>;
  /** Signs our origin with this agent's own key (agent/gossip/signatures.ts). */
  signer?: OriginSigner;
  /** With one, other origins are accepted only when signed by a key it trusts for their node. */
  keyring?: Keyring;
  /** Checks a stamp (default verifyStamp); a bench playing many agents in one process shares verdicts. */
  verify?: GossipStateOptions['verify'];
  /** Kubernetes: keys bound to agent pods by challenge and TokenReview (binding.ts); usually the keyring too. */
  binding?: BindingChannel;
}

export interface GossipStats {
  node: string;
  /** Our own origin's current version. */
  version: number;
  sent: { datagrams: number; bytes: number };
  received: { datagrams: number; bytes: number };
  dropped: Record<DropReason, number>;
  /** Deltas that arrived after a lost datagram, refused deltas, origins aged out. */
  gaps: number;
  rejected: number;
  /** Origin state refused: not signed by a key trusted for its node, or the signature did not verify. */
  untrusted: number;
  expired: number;
  originsKnown: number;
  /** Our signed state leaves our pods' calibration summaries out: with them it would not fit a datagram. */
  calibrationOmitted: boolean;
  origins: { origin: string; agent: string; pods: number; version: number; ageMs: number }[];
  /** Failure detection: probes started, ones that needed others' help, agents declared down, refutations; agents out now. */
  probes: FailureDetector['counters'] & { agentsOut: string[] };
}

export function parseHostPort(hostPort: string): { host: string; port: number } {
  const separator = hostPort.lastIndexOf(':');
  const port = Number(hostPort.slice(separator + 1));
  if (separator <= 0 || !Number.isInteger(port) || port < 0 || port > 65535)
    throw new Error(`not host:port: ${hostPort}`);
  return { host: hostPort.slice(0, separator).replace(/^\[|\]$/g, ''), port };
}

/** The longest `host:port` an agent can advertise (a bracketed IPv6 literal and a port). */
const MAX_ADDRESS_CHARS = 47;

/** A peer sends a few datagrams a round (digests, replies); 200 a second is far above that. */
const DEFAULT_MAX_DATAGRAMS_PER_SOURCE = 200;

const formatHostPort = (host: string, port: number): string => (isIPv6(host) ? `[${host}]:${port}` : `${host}:${port}`);

export class GossipNode {
  readonly nodeId: string;
  readonly intervalMs: number;
  #options: GossipNodeOptions;
  #now: () => number;
  #rand: () => number;
  #protocol: GossipProtocol;
  #sealer: Sealer | undefined;
  #key: Buffer;
  #boot: number;
  #opener: Opener;
  #maxDatagram: number;
  #gate: SourceGate;
  #socket: Socket | undefined;
  #timer: NodeJS.Timeout | undefined;
  #probeTimer: NodeJS.Timeout | undefined;
  #detector: FailureDetector | undefined;
  #peers: readonly string[];
  #members: readonly string[];
  #self = '';
  #listeners = new Set<() => void>();
  #changePending = false;
  #livenessMoved = false;
  #sent = { datagrams: 0, bytes: 0 };
  #received = { datagrams: 0, bytes: 0 };
  #dropped = Object.fromEntries(DROP_REASONS.map((r) => [r, 0])) as Record<DropReason, number>;

  constructor(options: GossipNodeOptions) {
    // An empty or short key would make every datagram forgeable by a guess: refuse to start.
    if (options.key.length < 16) throw new Error('gossip: the cluster key must be at least 16 bytes');
    this.#options = options;
    this.nodeId = options.nodeId;
    this.intervalMs = options.intervalMs ?? 200;
    this.#now = options.now ?? Date.now;
    this.#rand = options.rand ?? Math.random;
    // Whole ms: it travels as an integer (and names our origin instance: see originId).
    const boot = Math.floor(options.incarnation ?? this.#now());
    this.#boot = boot;
    this.#key = options.key;
    const maxDatagram = options.maxDatagram ?? 1400;
    // The sender is our address once bound (see start): room for the longest one.
    const longestSender = 'x'.repeat(
      Math.max(options.nodeId.length, options.advertise?.length ?? 0, MAX_ADDRESS_CHARS),
    );
    this.#protocol = new GossipProtocol({
      nodeId: options.nodeId,
      incarnation: boot,
      ttlMs: options.ttlMs,
      heartbeatMs: options.heartbeatMs,
      roundMs: this.intervalMs,
      fanout: options.fanout,
      maxPayload: maxDatagram - envelopeOverhead(longestSender, boot),
      maxDatagramsPerReply: options.maxDatagramsPerReply,
      groupBytes: Math.max(200, maxDatagram - 400),
      signer: options.signer,
      keyring: options.keyring,
      verify: options.verify,
    });
    this.#maxDatagram = maxDatagram;
    // Only a binding answer (a token) may be larger; checked once decoded.
    const openable = options.binding ? Math.max(maxDatagram, MAX_BINDING_DATAGRAM) : maxDatagram;
    const maxClockSkewMs = options.maxClockSkewMs ?? 30_000;
    this.#opener = new Opener({ key: options.key, maxDatagram: openable, maxClockSkewMs });
    this.#gate = new SourceGate({
      maxPerSecond: options.maxDatagramsPerSecondPerSource ?? DEFAULT_MAX_DATAGRAMS_PER_SOURCE,
    });
    this.#peers = options.peers;
    this.#members = options.peers;
  }

  async start(): Promise<void> {
    const { host, port } = parseHostPort(this.#options.bind);
    const socket = createSocket(isIPv6(host) ? 'udp6' : 'udp4');
    socket.on('message', (msg, rinfo) => this.#onDatagram(msg, rinfo));
    socket.on('error', () => {}); // e.g. ICMP unreachable from a peer that left; gossip retries by design
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(port, host, () => {
        socket.off('error', reject);
        resolve();
      });
    });
    this.#socket = socket;
    const bound = socket.address();
    this.#self = formatHostPort(bound.address, bound.port);
    const wildcard = bound.address === '0.0.0.0' || bound.address === '::';
    const agent = this.#options.advertise ?? (wildcard ? '' : this.#self);
    this.#protocol.state.setAgent(agent);
    // Peers send to the address they list us at: the advertised one, else the bound one.
    this.#opener.setRecipients(wildcard ? [agent] : [agent, this.#self]);
    // Replay windows are per sender: each agent its own, so two agents on one node (a rollout's
    // surge) do not take each other's datagrams for replays.
    this.#sealer = new Sealer({ sender: agent || this.nodeId, key: this.#key, boot: this.#boot });
    this.#detector = new FailureDetector(agent || this.#self, this.#options.probe);
    this.setPeers(this.#peers, this.#members);
    this.#options.binding?.attach((to, binding) => this.#send([{ to, payload: bindingPayload(binding) }]));
    this.#schedule();
    // Finer than a period, so a probe's timeouts are kept to within a few tens of ms.
    const d = this.#detector.options;
    this.#probeTimer = setInterval(
      () => this.#probeStep(this.#detector!.tick(this.#now(), this.#rand)),
      Math.max(10, Math.min(d.periodMs, d.directTimeoutMs) / 3),
    );
    this.#probeTimer.unref();
  }

  async stop(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    clearInterval(this.#probeTimer);
    const socket = this.#socket;
    this.#socket = undefined;
    if (socket) await new Promise<void>((resolve) => socket.close(() => resolve()));
  }

  /** The bound `host:port` (after start). */
  address(): string {
    return this.#self;
  }

  /**
   * Who to gossip with and accept datagrams from (`peers`), and whose origins are live
   * (`members`: the agents the cluster lists as live; default: the peers). An origin whose agent
   * leaves the members is no longer read, at once; listeners hear of it.
   */
  setPeers(peers: readonly string[], members: readonly string[] = peers): void {
    this.#peers = peers;
    this.#members = members;
    this.#gate.setPeers(peers);
    const others = peers.filter((p) => p !== this.#self && p !== this.#options.bind);
    this.#protocol.setPeers(others);
    this.#detector?.setMembers(others);
    if (this.#protocol.state.setMembers(new Set(members))) this.#changed();
  }

  /**
   * A failure on the request path points at `node` (one of its pods refused a connection): its
   * agent is probed now, directly then through others, and its pods are out of remoteEstimates
   * while that runs and after it if the agent is down. True when that changed remoteEstimates.
   */
  suspect(node: string): boolean {
    const detector = this.#detector;
    if (!detector) return false;
    const now = this.#now();
    let changed = false;
    for (const o of this.#protocol.state.origins(now)) {
      if (o.origin !== node || o.agent === '') continue;
      const step = detector.suspect(o.agent, now);
      this.#sendProbes(step);
      changed ||= step.changed;
    }
    return changed;
  }

  /** Our pods' estimates; gossiped from the next round on, and only what changed meaningfully. */
  publishLocal(estimates: readonly PodEstimate[]): void {
    this.#protocol.publishLocal(estimates);
  }

  /** Other nodes' pods, from origins heard from within the TTL; `at` and `ageMs` are in our clock. */
  remoteEstimates(): RemoteEstimate[] {
    const now = this.#now();
    const all = this.#protocol.state.remoteEstimates(now);
    const out = this.#detector?.outAgents();
    if (!out?.size) return all;
    // A node's pods are out when every agent gossiping for it is (a surge's second agent still speaks).
    const agentsOf = new Map<string, boolean>();
    for (const o of this.#protocol.state.origins(now)) {
      const allOut = (agentsOf.get(o.origin) ?? true) && o.agent !== '' && out.has(o.agent);
      agentsOf.set(o.origin, allOut);
    }
    return all.filter((e) => agentsOf.get(e.origin) !== true);
  }

  /**
   * Called when remote pods change (batched per burst of datagrams), and at most once a round
   * when only their freshness moved; returns an unsubscribe.
   */
  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  stats(): GossipStats {
    const now = this.#now();
    const origins = this.#protocol.state.origins(now);
    const counters = this.#protocol.counters;
    return {
      node: this.nodeId,
      version: this.#protocol.state.self.version,
      sent: { ...this.#sent },
      received: { ...this.#received },
      dropped: { ...this.#dropped },
      gaps: counters.gaps,
      rejected: counters.rejected,
      untrusted: counters.untrusted,
      expired: counters.expired,
      originsKnown: origins.length,
      calibrationOmitted: this.#protocol.state.calibrationOmitted,
      origins,
      probes: {
        probes: 0,
        indirect: 0,
        declaredDown: 0,
        refuted: 0,
        ...this.#detector?.counters,
        agentsOut: [...(this.#detector?.outAgents() ?? [])],
      },
    };
  }

  #schedule(): void {
    // ±10% jitter keeps agents started together from gossiping in lockstep.
    const delay = this.intervalMs * (0.9 + 0.2 * this.#rand());
    this.#timer = setTimeout(() => {
      if (!this.#socket) return;
      const step = this.#protocol.tick(this.#now(), this.#rand);
      this.#send(step.out);
      this.#rideAlong(step.out);
      this.#spreadNews(step.out);
      if (step.dataChanged || this.#livenessMoved) this.#changed();
      this.#livenessMoved = false;
      this.#schedule();
    }, delay);
    this.#timer.unref();
  }

  #onDatagram(msg: Buffer, rinfo: RemoteInfo): void {
    this.#received.datagrams++;
    this.#received.bytes += msg.length;
    const now = this.#now();
    const gated = this.#gate.admit(rinfo.address, now);
    if (gated !== undefined) {
      this.#dropped[gated]++;
      return;
    }
    const opened = this.#opener.open(msg, now);
    if (!opened.ok) {
      this.#dropped[opened.reason]++;
      return;
    }
    let payload;
    try {
      payload = decodePayload(opened.payload);
    } catch {
      this.#dropped.malformed++;
      return;
    }
    if (msg.length > this.#maxDatagram && !bindingOnly(payload)) {
      this.#dropped.oversized++;
      return;
    }
    const from = formatHostPort(rinfo.address, rinfo.port);
    if (payload.binding)
      this.#options.binding?.receive(from, payload.binding, (b) =>
        this.#send([{ to: from, payload: bindingPayload(b) }]),
      );
    if (this.#detector) {
      this.#probeStep(this.#detector.heard(from, now));
      if (payload.probe) this.#probeStep(this.#detector.receive(from, payload.probe, now));
    }
    if (payload.budget && this.#options.rider) {
      try {
        this.#sendRider(from, this.#options.rider.receive(payload.budget, this.#riderRoom()));
      } catch {
        this.#dropped.malformed++;
      }
    }
    const step = this.#protocol.receive(from, payload, now);
    this.#send(step.out);
    // New pods or loads: tell listeners now. Liveness alone (most datagrams in a large cluster)
    // moves estimates' ages by less than a round: once a round is enough.
    if (step.dataChanged) this.#changed();
    else if (step.livenessChanged) this.#livenessMoved = true;
  }

  #send(out: Outgoing[]): void {
    const socket = this.#socket;
    const sealer = this.#sealer;
    if (!socket || !sealer) return;
    const now = this.#now();
    for (const o of out) {
      const datagram = sealer.seal(o.payload, now, o.to);
      const { host, port } = parseHostPort(o.to);
      this.#sent.datagrams++;
      this.#sent.bytes += datagram.length;
      socket.send(datagram, port, host);
    }
  }

  /** A failure detector's step: its messages out, and listeners told when agents went out or came back. */
  #probeStep(step: ProbeStep): void {
    this.#sendProbes(step);
    if (step.changed) this.#changed();
  }

  #sendProbes(step: ProbeStep): void {
    if (step.out.length === 0) return;
    this.#send(step.out.map((o) => ({ to: o.to, payload: encodePayload({ deltas: [], probe: o.message }) })));
  }

  /** News of agents down (or back) goes with a round's digests too: it spreads as fast as gossip. */
  #spreadNews(out: Outgoing[]): void {
    if (!this.#detector || out.length === 0) return;
    const notices = this.#detector.news();
    if (notices.length === 0) return;
    const probe = { kind: 'news' as const, seq: 0, target: '', notices };
    this.#send([...new Set(out.map((o) => o.to))].map((to) => ({ to, payload: encodePayload({ deltas: [], probe }) })));
  }

  /** The rider's turn in a round: an ask to each peer this round's digests went to. */
  #rideAlong(out: Outgoing[]): void {
    const rider = this.#options.rider;
    if (!rider) return;
    const peers = this.#peers.filter((p) => p !== this.#self && p !== this.#options.bind).length;
    const state = this.#protocol.state;
    const now = this.#now();
    const signer = this.#options.signer;
    const alive = (node: string, incarnation: number) => {
      // By instance, not by node: during a surge a node has two agents, each its own origin.
      const origin = state.instance(node, incarnation);
      return origin !== undefined && now - origin.lastAdvance <= state.ttlMs;
    };
    const keys = signer && { of: state.keyOf.bind(state), sign: signer.sign.bind(signer) };
    rider.round(Math.max(state.size, peers + 1), alive, keys);
    for (const to of new Set(out.map((o) => o.to))) {
      const ask = rider.ask(this.#riderRoom());
      if (ask) this.#sendRider(to, [ask]);
    }
  }

  #sendRider(to: string, messages: Uint8Array[]): void {
    this.#send(messages.map((budget) => ({ to, payload: encodePayload({ deltas: [], budget }) })));
  }

  /** A rider's message is Payload's only field: its tag and a length prefix of up to two bytes. */
  #riderRoom(): number {
    return this.#protocol.maxPayload - 3;
  }

  /** Listeners hear about a burst of datagrams once. */
  #changed(): void {
    if (this.#changePending) return;
    this.#changePending = true;
    setImmediate(() => {
      this.#changePending = false;
      for (const listener of this.#listeners) listener();
    });
  }
}
