// Gossip at scale, in virtual time: N agents, each the real protocol state machine with the real
// envelope (protobuf + HMAC-SHA256), over a simulated network with loss and a small latency.
//
// Measures, per cluster size and loss rate:
// - how long after an origin publishes a new estimate until 99.9% of the other agents hold it
//   (from the publishLocal call, so it includes the wait for the origin's next round);
// - bytes each agent sends per second in steady state (every origin heartbeating, no data
//   changes), counting whole datagrams: envelope and HMAC included, IP/UDP headers not (an agent
//   receives as much as it sends, on average: in + out is twice this);
// - the liveness margin: how long ago each agent last heard each origin advance (against the
//   TTL, a backstop: liveness comes from membership, every agent listed as a member here);
// - origins wrongly aged out (nobody dies in the steady state, so every expiry is a false one);
// - departures: one agent leaves the membership (each agent's discovery hears of it 0-1 s later,
//   a watch's spread) while it keeps gossiping: ms until 99.9% of the others no longer read its
//   pods; and, up to 100 agents, one agent falls silent while still listed (a lost node that
//   membership has not noticed): ms until the TTL backstop has every other agent drop it.
//
// Each (size, loss) runs in its own child process, two at a time.
//
// Steady state is reached by seeding every agent with every origin's full state through the real
// apply() (gossiping 1,000 joins from empty would take longer than the bench may), then letting
// the cluster run a few seconds before measuring.
//
// Every origin is signed by its agent's own Ed25519 key and verified by every receiver
// (agent/gossip/signatures.ts), unless --unsigned: the stamps' bytes are in the figures. The
// simulated agents share one process, so a stamp verified once is not verified again (a real
// agent verifies each it applies: the row counts those per agent, and the sign/verify cost is
// measured at the end of the run).
//
//   node bench/gossip.ts [--sizes 10,100,1000] [--losses 0,0.1,0.3] [--trials N] [--ttl MS] [--unsigned]
import { execFile } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Opener, Sealer } from '../agent/gossip/envelope.ts';
import { GossipProtocol } from '../agent/gossip/protocol.ts';
import { DEFAULT_TTL_MS } from '../agent/gossip/state.ts';
import { decodePayload, encodePayload } from '../agent/gossip/wire.ts';
import { envelopeOverhead } from '../agent/gossip/wire-size.ts';
import type { PodEstimate } from '../agent/types.ts';
import { writeDelta } from '../agent/gossip/packing.ts';
import { createHash, type KeyObject } from 'node:crypto';
import {
  OriginSigner,
  publicKeyFromRaw,
  StaticKeyring,
  stampMessage,
  stateHash,
  verifyStamp,
} from '../agent/gossip/signatures.ts';
import { mulberry32 } from '../shared/sim/random.ts';

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : fallback;
}

const INTERVAL_MS = 200;
const FANOUT = 3;
// --ttl: the agents' TTL (heartbeat: a third of it); the agent's default unless given.
const TTL_MS = Number(arg('ttl', String(DEFAULT_TTL_MS)));
const DISCOVERY_SPREAD_MS = 1000;
const MAX_DATAGRAM = 1400;
const PODS_PER_NODE = 8;
const LATENCY_MS = [1, 5]; // uniform, one way
const KEY = Buffer.alloc(32, 7);
const EPOCH = 1_760_000_000_000;
const SIGNED = !process.argv.includes('--unsigned');

/** Signatures made and stamps checked (by any agent; a real agent checks each stamp it applies). */
const crypto = { signs: 0, verifies: 0 };
class CountingSigner extends OriginSigner {
  override sign(message: Buffer): Buffer {
    crypto.signs++;
    return super.sign(message);
  }
}
const verdicts = new Map<string, boolean>();
function sharedVerify(key: KeyObject, message: Buffer, stamp: Uint8Array): boolean {
  crypto.verifies++;
  const id = Buffer.from(stamp).toString('base64') + createHash('sha256').update(message).digest('base64');
  let verdict = verdicts.get(id);
  if (verdict === undefined) verdicts.set(id, (verdict = verifyStamp(key, message, stamp)));
  return verdict;
}

/** Binary min-heap of timed events. */
class Events {
  #items: { at: number; seq: number; run: () => void }[] = [];
  #seq = 0;
  push(at: number, run: () => void): void {
    const items = this.#items;
    items.push({ at, seq: this.#seq++, run });
    let i = items.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (before(items[p], items[i])) break;
      [items[p], items[i]] = [items[i], items[p]];
      i = p;
    }
  }
  pop(): { at: number; run: () => void } | undefined {
    const items = this.#items;
    const top = items[0];
    const last = items.pop();
    if (items.length && last) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < items.length && before(items[l], items[m])) m = l;
        if (r < items.length && before(items[r], items[m])) m = r;
        if (m === i) break;
        [items[m], items[i]] = [items[i], items[m]];
        i = m;
      }
    }
    return top;
  }
  peekAt(): number {
    return this.#items.length ? this.#items[0].at : Infinity;
  }
}
const before = (a: { at: number; seq: number }, b: { at: number; seq: number }) =>
  a.at < b.at || (a.at === b.at && a.seq < b.seq);

interface Agent {
  name: string;
  index: number;
  protocol: GossipProtocol;
  sealer: Sealer;
  opener: Opener;
}

function estimates(node: string, queuedNow: number): PodEstimate[] {
  return Array.from({ length: PODS_PER_NODE }, (_, i) => ({
    pod: {
      uid: `${node}-${String(i).padStart(4, '0')}-4a7f-9c1e-8d2b5e6f7a80`.slice(0, 36),
      name: `llama-3-8b-${i}`,
      namespace: 'inference',
      node,
      address: `10.${(i * 7) % 250}.${i}.${(i * 13) % 250}:8000`,
      models: ['llama-3-8b'],
      engine: 'vllm' as const,
    },
    queued: 1.5,
    queuedNow: i === 0 ? queuedNow : 1,
    running: 12,
    kvCache: 0.42,
    params: { base: 48, perQueued: 31, perRunning: 4.5, perKPromptTokens: 22 },
    at: EPOCH,
    origin: node,
    version: 0,
  }));
}

const run = promisify(execFile);

class Cluster {
  now = EPOCH;
  loss = 0;
  sentBytes = 0;
  sentDatagrams = 0;
  readonly agents: Agent[];
  readonly rand: () => number;
  #events = new Events();
  #silent = new Set<number>();
  #byName = new Map<string, Agent>();
  /** Called after an agent takes in a datagram. */
  onReceive: ((agent: Agent) => void) | undefined;

  constructor(n: number, seed: number) {
    this.rand = mulberry32(seed);
    const names = Array.from({ length: n }, (_, i) => `ip-10-20-${Math.floor(i / 250)}-${i % 250}.ec2.internal`);
    const signers = names.map(() => (SIGNED ? new CountingSigner() : undefined));
    const keyring = SIGNED
      ? new StaticKeyring(names.map((node, i) => ({ node, key: signers[i]!.publicKey.toString('base64') })))
      : undefined;
    this.agents = names.map((name, index) => {
      const protocol = new GossipProtocol({
        nodeId: name,
        agent: name, // its address on this network
        incarnation: EPOCH,
        ttlMs: TTL_MS,
        roundMs: INTERVAL_MS,
        fanout: FANOUT,
        maxPayload: MAX_DATAGRAM - envelopeOverhead(name, EPOCH),
        groupBytes: MAX_DATAGRAM - 400,
        signer: signers[index],
        keyring,
        verify: sharedVerify,
      });
      protocol.setPeers(names.filter((p) => p !== name));
      protocol.state.setMembers(new Set(names));
      return {
        name,
        index,
        protocol,
        sealer: new Sealer({ sender: name, key: KEY, boot: EPOCH }),
        opener: new Opener({ key: KEY, maxDatagram: MAX_DATAGRAM, maxClockSkewMs: 30_000, recipients: [name] }),
      };
    });
    for (const a of this.agents) this.#byName.set(a.name, a);
  }

  /** Every agent holds every origin's full state, as after a long quiet period. */
  seed(): void {
    // Published at different moments, as agents that booted at different times: heartbeats
    // then fall at different phases, as they do in a real cluster.
    const heartbeatMs = this.agents[0].protocol.state.heartbeatMs;
    for (const a of this.agents)
      a.protocol.state.localUpdate(estimates(a.name, 1), this.now - this.rand() * heartbeatMs);
    for (const a of this.agents) {
      const written = writeDelta(a.protocol.state.self, 0, 1 << 20, this.now)!;
      const [delta] = decodePayload(encodePayload({ deltas: [written.delta] })).deltas;
      for (const b of this.agents) if (b !== a) b.protocol.state.apply([delta], this.now);
    }
    for (const a of this.agents) this.#scheduleTick(a, this.now + this.rand() * INTERVAL_MS);
  }

  #scheduleTick(a: Agent, at: number): void {
    this.#events.push(at, () => {
      if (this.#silent.has(a.index)) return;
      this.#send(a, a.protocol.tick(this.now, this.rand).out);
      this.#scheduleTick(a, this.now + INTERVAL_MS * (0.9 + 0.2 * this.rand()));
    });
  }

  #send(from: Agent, out: { to: string; payload: Uint8Array }[]): void {
    for (const o of out) {
      const datagram = from.sealer.seal(o.payload, this.now, o.to);
      this.sentBytes += datagram.length;
      this.sentDatagrams++;
      if (this.rand() < this.loss) continue;
      const to = this.#byName.get(o.to)!;
      const latency = LATENCY_MS[0] + this.rand() * (LATENCY_MS[1] - LATENCY_MS[0]);
      this.#events.push(this.now + latency, () => this.#deliver(from, to, datagram));
    }
  }

  #deliver(from: Agent, to: Agent, datagram: Uint8Array): void {
    if (this.#silent.has(to.index)) return;
    const opened = to.opener.open(datagram, this.now);
    if (!opened.ok) throw new Error(`bench datagram dropped: ${opened.reason}`);
    const step = to.protocol.receive(from.name, decodePayload(opened.payload), this.now);
    this.#send(to, step.out);
    this.onReceive?.(to);
  }

  /** Runs `run` at `at` (virtual time). */
  at(at: number, run: () => void): void {
    this.#events.push(at, run);
  }

  /** Stops an agent: it neither sends nor takes datagrams from now on. */
  silence(a: Agent): void {
    this.#silent.add(a.index);
  }

  runUntil(t: number, stop?: () => boolean): void {
    while (this.#events.peekAt() <= t) {
      const e = this.#events.pop()!;
      this.now = e.at;
      e.run();
      if (stop?.()) return;
    }
    this.now = t;
  }

  expired(): number {
    return this.agents.reduce((sum, a) => sum + a.protocol.counters.expired, 0);
  }
}

/** One origin publishes a new estimate: ms until 99.9% of the others hold it (undefined: never). */
function propagate(cluster: Cluster, marker: number, timeoutMs: number): number | undefined {
  const origin = cluster.agents[Math.floor(cluster.rand() * cluster.agents.length)];
  const needed = Math.ceil(0.999 * (cluster.agents.length - 1));
  const holds = (a: Agent) =>
    a.protocol.state.origin(origin.name, origin.name)?.pods.get(0)?.entry.queuedNow === marker;
  const holders = new Set<number>();
  const start = cluster.now;
  let reached: number | undefined;
  cluster.onReceive = (a) => {
    if (a === origin || holders.has(a.index) || !holds(a)) return;
    holders.add(a.index);
    if (holders.size >= needed) reached ??= cluster.now - start;
  };
  origin.protocol.publishLocal(estimates(origin.name, marker));
  cluster.runUntil(start + timeoutMs, () => reached !== undefined);
  cluster.onReceive = undefined;
  return reached;
}

/** Whether `a` reads any pod of `gone`'s node (what its router would see as candidates). */
const reads = (cluster: Cluster, a: Agent, gone: Agent) =>
  a.protocol.state.remoteEstimates(cluster.now).some((e) => e.origin === gone.name);

/** ms from `start` until at most 0.1% of the agents other than `gone` read its pods (undefined: never). */
function untilUnread(cluster: Cluster, gone: Agent, start: number, timeoutMs: number): number | undefined {
  const others = cluster.agents.filter((a) => a !== gone);
  const allowed = Math.floor(0.001 * others.length);
  let reached: number | undefined;
  const check = () => {
    if (reached === undefined && others.filter((a) => reads(cluster, a, gone)).length <= allowed)
      reached = cluster.now - start;
    return reached !== undefined;
  };
  for (let t = start; t <= start + timeoutMs && !check(); t += 50) cluster.runUntil(t);
  return reached;
}

/** An agent leaves the membership (deleted, or its readiness failed) while it keeps gossiping. */
function depart(cluster: Cluster, gone: Agent): number | undefined {
  const start = cluster.now;
  const members = new Set(cluster.agents.filter((a) => a !== gone).map((a) => a.name));
  for (const a of cluster.agents)
    cluster.at(start + cluster.rand() * DISCOVERY_SPREAD_MS, () => a.protocol.state.setMembers(members));
  return untilUnread(cluster, gone, start, DISCOVERY_SPREAD_MS + 5000);
}

/** An agent falls silent while still listed: only the TTL backstop removes it. */
function fallSilent(cluster: Cluster, gone: Agent): number | undefined {
  cluster.silence(gone);
  return untilUnread(cluster, gone, cluster.now, TTL_MS + 5000);
}

const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};

interface Row {
  agents: number;
  loss: number;
  trials: number;
  /** ms from publishLocal until 99.9% of the other agents hold the estimate. */
  propagation999: { median: number | null; p90: number | null; max: number | null; missed: number };
  /** Steady state, per agent: datagram bytes sent per second, and the same in kbit/s. */
  bytesPerNodePerSec: number;
  signed: boolean;
  /** Per agent per second over the steady state and the propagation trials: signatures made, stamps checked. */
  signsPerNodePerSec: number;
  verifiesPerNodePerSec: number;
  kbitPerNode: number;
  datagramsPerNodePerSec: number;
  /** Liveness margin: ms since each agent last heard each origin advance (against the TTL). */
  ageP999: number;
  ageMax: number;
  falseExpiries: number;
  /** ms until 99.9% of the others stop reading an agent that left the membership / fell silent. */
  departedMs: number | null;
  silentMs: number | null;
  wallSeconds: number;
}

function ages(cluster: Cluster): number[] {
  const out: number[] = [];
  for (const a of cluster.agents) for (const o of a.protocol.state.origins(cluster.now)) out.push(o.ageMs);
  return out.sort((x, y) => x - y);
}

/** One cluster size at one loss rate: seed, settle, measure steady state, then time propagation. */
function runJob(n: number, loss: number, trials: number): Row {
  const started = performance.now();
  const cluster = new Cluster(n, 42 + n + Math.round(loss * 1000));
  cluster.seed();
  cluster.loss = loss;
  cluster.runUntil(cluster.now + 3000); // heartbeats everywhere, and the loss rate's steady state
  const expiredBefore = cluster.expired();
  const cryptoBefore = { ...crypto, at: cluster.now };
  const bytesBefore = cluster.sentBytes;
  const datagramsBefore = cluster.sentDatagrams;
  const windowMs = n >= 1000 ? 2000 : 4000;
  cluster.runUntil(cluster.now + windowMs);
  const seconds = windowMs / 1000;
  const bytesPerNodePerSec = (cluster.sentBytes - bytesBefore) / n / seconds;
  const datagramsPerNodePerSec = (cluster.sentDatagrams - datagramsBefore) / n / seconds;
  const liveness = ages(cluster);

  const reached: number[] = [];
  for (let i = 0; i < trials; i++) {
    const took = propagate(cluster, 1000 + i, 10_000);
    if (took !== undefined) reached.push(took);
    cluster.runUntil(cluster.now + 300 + cluster.rand() * 300);
  }
  const cryptoSeconds = (cluster.now - cryptoBefore.at) / 1000;
  const perNode = (count: number) => Math.round((count / n / cryptoSeconds) * 100) / 100;
  const signsPerNodePerSec = perNode(crypto.signs - cryptoBefore.signs);
  const verifiesPerNodePerSec = perNode(crypto.verifies - cryptoBefore.verifies);
  const round = (x: number | undefined) => (x === undefined ? null : Math.round(x));
  const falseExpiries = cluster.expired() - expiredBefore;
  // Two different agents: one leaves the membership, then another falls silent.
  const departing = Math.floor(cluster.rand() * n);
  const departedMs = round(depart(cluster, cluster.agents[departing]));
  // 30 s of virtual time at 1,000 agents costs minutes: the backstop is measured on smaller clusters.
  const silent = cluster.agents[(departing + 1 + Math.floor(cluster.rand() * (n - 1))) % n];
  const silentMs = n <= 100 ? round(fallSilent(cluster, silent)) : null;
  return {
    agents: n,
    loss,
    trials,
    propagation999: {
      median: round(quantile(reached, 0.5)),
      p90: round(quantile(reached, 0.9)),
      max: round(reached.length ? Math.max(...reached) : undefined),
      missed: trials - reached.length,
    },
    bytesPerNodePerSec: Math.round(bytesPerNodePerSec),
    signed: SIGNED,
    signsPerNodePerSec,
    verifiesPerNodePerSec,
    kbitPerNode: Math.round((bytesPerNodePerSec * 8) / 100) / 10,
    datagramsPerNodePerSec: Math.round(datagramsPerNodePerSec * 10) / 10,
    ageP999: Math.round(quantile(liveness, 0.999)),
    ageMax: Math.round(liveness.at(-1) ?? 0),
    falseExpiries,
    departedMs,
    silentMs,
    wallSeconds: Math.round((performance.now() - started) / 100) / 10,
  };
}

// A child process runs one job and prints its row. 1,000 simulated agents hold ~10^6 origin
// records in one heap; a large young generation keeps the per-datagram garbage out of it, which
// makes the run several times faster. Jobs run two at a time (the bench's budget is 2 cores).
const job = arg('job', '');
if (job) {
  const [n, loss, trials] = job.split(',').map(Number);
  process.stdout.write(JSON.stringify(runJob(n, loss, trials)) + '\n');
} else {
  await main();
}

async function main(): Promise<void> {
  const sizes = arg('sizes', '10,100,1000').split(',').map(Number);
  const losses = arg('losses', '0,0.1,0.3').split(',').map(Number);
  const trialsArg = arg('trials', '');
  const jobs = sizes.flatMap((n) =>
    losses.map((loss) => ({ n, loss, trials: trialsArg ? Number(trialsArg) : n >= 1000 ? 3 : 20 })),
  );
  // Longest first (most agents, then most loss), so the two slots finish together.
  const queue = [...jobs].sort((a, b) => b.n - a.n || b.loss - a.loss);
  const rows = new Map<(typeof jobs)[number], Row>();
  const started = performance.now();
  const worker = async () => {
    for (let j = queue.shift(); j; j = queue.shift()) {
      const args = [
        '--max-semi-space-size=256',
        fileURLToPath(import.meta.url),
        '--job',
        `${j.n},${j.loss},${j.trials}`,
        '--ttl',
        String(TTL_MS),
        ...(SIGNED ? [] : ['--unsigned']),
      ];
      const { stdout } = await run(process.execPath, args);
      const row = JSON.parse(stdout) as Row;
      rows.set(j, row);
      console.error(`${row.agents} agents, ${row.loss * 100}% loss: done in ${row.wallSeconds} s`);
    }
  };
  await Promise.all(Array.from({ length: Math.min(2, availableParallelism()) }, worker));
  const ordered = jobs.map((j) => rows.get(j)!);

  const fmt = (x: number | null) => (x === null ? '—' : `${x}`);
  const table = [
    '| agents | loss | to 99.9% of agents: median / p90 / max (ms) | bytes/agent/s | kbit/s/agent | datagrams/agent/s | signs / stamp checks per agent/s | liveness age p99.9 / max (ms) | false expiries | left membership: unread by 99.9% (ms) | silent, still listed: unread by 99.9% (ms) |',
    '| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...ordered.map(
      (r) =>
        `| ${r.agents} | ${r.loss * 100}% | ${fmt(r.propagation999.median)} / ${fmt(r.propagation999.p90)} / ${fmt(r.propagation999.max)}${r.propagation999.missed ? ` (${r.propagation999.missed} of ${r.trials} missed)` : ''} | ${r.bytesPerNodePerSec} | ${r.kbitPerNode} | ${r.datagramsPerNodePerSec} | ${r.signed ? `${r.signsPerNodePerSec} / ${r.verifiesPerNodePerSec}` : 'unsigned'} | ${r.ageP999} / ${r.ageMax} | ${r.falseExpiries} | ${fmt(r.departedMs)} | ${fmt(r.silentMs)} |`,
    ),
  ].join('\n');

  const cost = SIGNED ? stampCost() : undefined;
  const results = {
    bench: 'gossip',
    stampCostUs: cost,
    node: process.version,
    settings: {
      intervalMs: INTERVAL_MS,
      fanout: FANOUT,
      ttlMs: TTL_MS,
      heartbeatMs: TTL_MS / 3,
      maxDatagram: MAX_DATAGRAM,
      podsPerNode: PODS_PER_NODE,
      latencyMs: LATENCY_MS,
      discoverySpreadMs: DISCOVERY_SPREAD_MS,
    },
    goals: { propagation999At1000Ms: 1000, kbitPerNode: 50 },
    reference: { serfModel: { propagation999At1000Ms: 2000, kbitPerNode: 328 } },
    rows: ordered,
    wallSeconds: Math.round((performance.now() - started) / 100) / 10,
  };
  // The default run is the record; a run with other options writes beside it.
  const custom = process.argv.length > 2;
  const file = custom ? `./results/gossip-${Date.now()}.json` : './results/gossip.json';
  mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
  writeFileSync(new URL(file, import.meta.url), JSON.stringify(results, null, 2) + '\n');
  console.log(table);
  if (cost)
    console.log(
      `\none stamp of ${PODS_PER_NODE} pods (state hash + Ed25519), this machine: sign ${cost.sign} µs, check ${cost.verify} µs`,
    );
  console.log(`\n(${results.wallSeconds} s wall; results in bench/${file.slice(2)})`);
}

/** What an origin pays per new epoch (hash its pods, sign) and a receiver per stamp it applies (hash, verify). */
function stampCost(): { sign: number; verify: number } {
  const signer = new OriginSigner();
  const protocol = new GossipProtocol({ nodeId: 'n', agent: 'n', incarnation: EPOCH, maxPayload: 1200, signer });
  protocol.state.localUpdate(estimates('n', 1), EPOCH);
  const self = protocol.state.self;
  const key = publicKeyFromRaw(signer.publicKey)!;
  const rounds = 300;
  let stamp = self.stamp!;
  let t = performance.now();
  for (let i = 0; i < rounds; i++) stamp = signer.sign(stampMessage(self, self.version, stateHash(self.pods)));
  const sign = ((performance.now() - t) / rounds) * 1000;
  t = performance.now();
  for (let i = 0; i < rounds; i++) verifyStamp(key, stampMessage(self, self.version, stateHash(self.pods)), stamp);
  const verify = ((performance.now() - t) / rounds) * 1000;
  return { sign: Math.round(sign), verify: Math.round(verify) };
}
