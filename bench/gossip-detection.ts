// Failure detection at scale, in virtual time: N agents, each the real FailureDetector
// (agent/gossip/probe.ts) sending real datagrams (Payload.probe encoded by agent/gossip/wire.ts,
// sealed by the real envelope with its HMAC) over a simulated network with loss and 1-5 ms
// latency; news of a down agent also rides on gossip rounds (every 200 ms, ±10 %, to 3 random
// peers), as node.ts sends it.
//
// Measures, per cluster size and loss rate:
// - bytes each agent sends per second for probes in steady state (nobody dies), envelope and
//   HMAC included (gossip's own bytes are bench:gossip's table: add them);
// - false suspicions: live agents declared down by anyone in that steady state, per agent-hour;
// - detection: one agent dies (silent from that instant); ms until the first agent declares it
//   down, until 99.9% of the others hold it out of their decisions, and until all of them do.
//
//   node bench/gossip-detection.ts [--sizes 10,100,1000] [--losses 0,0.01] [--trials N] [--steady S]
import { mkdirSync, writeFileSync } from 'node:fs';
import { Sealer } from '../agent/gossip/envelope.ts';
import { DEFAULT_PROBE, FailureDetector, type ProbeOut } from '../agent/gossip/probe.ts';
import { encodePayload } from '../agent/gossip/wire.ts';
import { mulberry32 } from '../shared/sim/random.ts';

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : fallback;
}

const ROUND_MS = 200;
const FANOUT = 3;
const TICK_MS = Math.min(DEFAULT_PROBE.periodMs, DEFAULT_PROBE.directTimeoutMs) / 3;
const LATENCY_MS = [1, 5];
const KEY = Buffer.alloc(32, 7);
const EPOCH = 1_760_000_000_000;

/** Timed events, kept sorted by insertion into buckets of 1 ms (virtual time moves in ms steps). */
class Events {
  readonly #buckets = new Map<number, (() => void)[]>();
  #next = Infinity;
  push(at: number, run: () => void): void {
    const t = Math.ceil(at);
    const bucket = this.#buckets.get(t);
    if (bucket) bucket.push(run);
    else this.#buckets.set(t, [run]);
    if (t < this.#next) this.#next = t;
  }
  /** Runs everything due up to `t`, in time order; returns the time reached. */
  runUntil(t: number, clock: { now: number }): void {
    while (this.#next <= t) {
      const at = this.#next;
      clock.now = at;
      const bucket = this.#buckets.get(at)!;
      // Runs appended while running this bucket run too.
      for (let i = 0; i < bucket.length; i++) bucket[i]();
      this.#buckets.delete(at);
      this.#next = Infinity;
      for (const k of this.#buckets.keys()) if (k < this.#next) this.#next = k;
    }
    clock.now = t;
  }
}

interface Agent {
  name: string;
  detector: FailureDetector;
  sealer: Sealer;
  dead: boolean;
}

class Cluster {
  now = EPOCH;
  loss: number;
  sentBytes = 0;
  readonly agents: Agent[];
  readonly rand: () => number;
  readonly #events = new Events();
  readonly #byName = new Map<string, Agent>();

  constructor(n: number, loss: number, seed: number) {
    this.loss = loss;
    this.rand = mulberry32(seed);
    const names = Array.from({ length: n }, (_, i) => `10.20.${Math.floor(i / 250)}.${i % 250}:7946`);
    this.agents = names.map((name) => {
      const detector = new FailureDetector(name);
      detector.setMembers(names);
      return { name, detector, sealer: new Sealer({ sender: name, key: KEY, boot: EPOCH }), dead: false };
    });
    for (const a of this.agents) {
      this.#byName.set(a.name, a);
      this.#every(a, TICK_MS, () => this.#send(a, a.detector.tick(this.now, this.rand).out));
      this.#every(a, ROUND_MS, () => this.#round(a), true);
    }
  }

  #every(a: Agent, ms: number, run: () => void, jitter = false): void {
    const step = () => {
      if (a.dead) return;
      run();
      this.#events.push(this.now + (jitter ? ms * (0.9 + 0.2 * this.rand()) : ms), step);
    };
    this.#events.push(this.now + this.rand() * ms, step);
  }

  /** A gossip round: its digests go to 3 random peers, and news (if any) with them. */
  #round(a: Agent): void {
    const notices = a.detector.news();
    if (notices.length === 0) return;
    const out: ProbeOut[] = [];
    for (let i = 0; i < FANOUT; i++) {
      const to = this.agents[Math.floor(this.rand() * this.agents.length)];
      if (to !== a) out.push({ to: to.name, message: { kind: 'news', seq: 0, target: '', notices } });
    }
    this.#send(a, out);
  }

  #send(from: Agent, out: ProbeOut[]): void {
    for (const o of out) {
      const datagram = from.sealer.seal(encodePayload({ deltas: [], probe: o.message }), this.now, o.to);
      this.sentBytes += datagram.length;
      if (this.rand() < this.loss) continue;
      const to = this.#byName.get(o.to)!;
      const latency = LATENCY_MS[0] + this.rand() * (LATENCY_MS[1] - LATENCY_MS[0]);
      this.#events.push(this.now + latency, () => {
        if (to.dead) return;
        this.#send(to, to.detector.heard(from.name, this.now).out);
        this.#send(to, to.detector.receive(from.name, o.message, this.now).out);
      });
    }
  }

  runFor(ms: number, everyMs = 0, check?: () => void): void {
    const end = this.now + ms;
    if (!everyMs || !check) return this.#events.runUntil(end, this);
    for (let t = this.now + everyMs; t <= end; t += everyMs) {
      this.#events.runUntil(t, this);
      check();
    }
  }

  declaredDown(): number {
    return this.agents.reduce((sum, a) => sum + a.detector.counters.declaredDown, 0);
  }
}

const quantile = (xs: number[], q: number): number | null => {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.min(s.length - 1, Math.floor(q * s.length))]);
};

interface Row {
  agents: number;
  loss: number;
  trials: number;
  probeBytesPerAgentPerSec: number;
  probeKbitPerAgent: number;
  /** Live agents declared down in the steady state, per agent and hour. */
  falseDownsPerAgentHour: number;
  falseDowns: number;
  steadySeconds: number;
  /** ms from the death: first agent to declare it down; 99.9% and 100% of the others holding it out. */
  firstDetection: { p50: number | null; p99: number | null; max: number | null };
  outAt999: { p50: number | null; p99: number | null; max: number | null };
  outAtAll: { p50: number | null; p99: number | null; max: number | null; missed: number };
  wallSeconds: number;
}

function runJob(n: number, loss: number, trials: number, steadySeconds: number): Row {
  const started = performance.now();
  const cluster = new Cluster(n, loss, 7 + n + Math.round(loss * 1000));
  cluster.runFor(2000);
  const bytesBefore = cluster.sentBytes;
  const downsBefore = cluster.declaredDown();
  cluster.runFor(steadySeconds * 1000);
  const probeBytesPerAgentPerSec = (cluster.sentBytes - bytesBefore) / n / steadySeconds;
  const falseDowns = cluster.declaredDown() - downsBefore;

  const first: number[] = [];
  const at999: number[] = [];
  const atAll: number[] = [];
  let missed = 0;
  for (let trial = 0; trial < trials; trial++) {
    const victim = cluster.agents[Math.floor(cluster.rand() * n)];
    if (victim.dead) continue;
    const others = cluster.agents.filter((a) => a !== victim && !a.dead);
    const needed = Math.ceil(0.999 * others.length);
    const start = cluster.now;
    victim.dead = true;
    let firstAt: number | undefined;
    let reached999: number | undefined;
    let reachedAll: number | undefined;
    const downsAtStart = others.map((a) => a.detector.counters.declaredDown);
    cluster.runFor(10_000, 10, () => {
      if (reachedAll !== undefined) return;
      const holding = others.filter((a) => a.detector.isOut(victim.name)).length;
      if (firstAt === undefined && others.some((a, i) => a.detector.counters.declaredDown > downsAtStart[i]))
        firstAt = cluster.now - start;
      if (reached999 === undefined && holding >= needed) reached999 = cluster.now - start;
      if (holding === others.length) reachedAll = cluster.now - start;
    });
    if (firstAt !== undefined) first.push(firstAt);
    if (reached999 !== undefined) at999.push(reached999);
    if (reachedAll !== undefined) atAll.push(reachedAll);
    else missed++;
  }
  const stats = (xs: number[]) => ({
    p50: quantile(xs, 0.5),
    p99: quantile(xs, 0.99),
    max: xs.length ? Math.round(Math.max(...xs)) : null,
  });
  return {
    agents: n,
    loss,
    trials,
    probeBytesPerAgentPerSec: Math.round(probeBytesPerAgentPerSec),
    probeKbitPerAgent: Math.round((probeBytesPerAgentPerSec * 8) / 100) / 10,
    falseDownsPerAgentHour: Math.round((falseDowns / n / steadySeconds) * 3600 * 1000) / 1000,
    falseDowns,
    steadySeconds,
    firstDetection: stats(first),
    outAt999: stats(at999),
    outAtAll: { ...stats(atAll), missed },
    wallSeconds: Math.round((performance.now() - started) / 100) / 10,
  };
}

const sizes = arg('sizes', '10,100,1000').split(',').map(Number);
const losses = arg('losses', '0,0.01').split(',').map(Number);
const trials = Number(arg('trials', '20'));
const steady = Number(arg('steady', '20'));
const rows: Row[] = [];
for (const n of sizes) {
  for (const loss of losses) {
    const row = runJob(n, loss, trials, steady);
    rows.push(row);
    console.error(`${n} agents, ${loss * 100}% loss: done in ${row.wallSeconds} s`);
  }
}
const fmt = (s: { p50: number | null; p99: number | null; max: number | null }) => `${s.p50} / ${s.p99} / ${s.max}`;
const table = [
  '| agents | loss | first declared down: p50 / p99 / max (ms) | out at 99.9% of agents: p50 / p99 / max (ms) | out at all: p50 / p99 / max (ms) | probe bytes/agent/s | probe kbit/s/agent | false downs (steady) |',
  '| ---: | ---: | --- | --- | --- | ---: | ---: | ---: |',
  ...rows.map(
    (r) =>
      `| ${r.agents} | ${r.loss * 100}% | ${fmt(r.firstDetection)} | ${fmt(r.outAt999)} | ${fmt(r.outAtAll)}${r.outAtAll.missed ? ` (${r.outAtAll.missed} missed)` : ''} | ${r.probeBytesPerAgentPerSec} | ${r.probeKbitPerAgent} | ${r.falseDowns} in ${r.steadySeconds} s |`,
  ),
].join('\n');
const results = {
  bench: 'gossip-detection',
  node: process.version,
  settings: { ...DEFAULT_PROBE, roundMs: ROUND_MS, fanout: FANOUT, tickMs: TICK_MS, latencyMs: LATENCY_MS },
  goals: { outAt999P99At1000Ms: 2000, kbitPerAgentWithGossip: 50 },
  rows,
};
const custom = process.argv.length > 2;
const file = custom ? `./results/gossip-detection-${Date.now()}.json` : './results/gossip-detection.json';
mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
writeFileSync(new URL(file, import.meta.url), JSON.stringify(results, null, 2) + '\n');
console.log(table);
console.log(`\n(results in bench/${file.slice(2)})`);
