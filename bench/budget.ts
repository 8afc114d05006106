// Overflow budget enforcement at 10, 100 and 1,000 agents, in virtual time.
//
// Every agent is a real BudgetLedger and a real BudgetExchange (agent/budget/exchange.ts: the code
// the gossip node runs, Payload.budget): each round (200 ms, ±10% phase) it asks 3 random peers;
// every message goes through the real wire format (shared/proto/budget.proto), cut to what one
// gossip datagram holds (1,400 bytes less the envelope), answers spanning at most 4 datagrams,
// 1–5 ms one-way latency. Every agent is synced (a running cluster) and knows all N.
//
// One tenant overflows through EVERY agent at once (the worst case: each agent is blind to the
// others' last admissions) against a limit of L tokens per minute. Each request reserves its
// estimate (prompt 400 + max_tokens 600 = 1,000) and settles 1–3 s later with what the provider
// reports (400 + 100..600 completion). Scenarios:
//   steady: the cluster offers L every 3 s, spread over all agents (budget runs out after ~4 s);
//   burst:  every agent offers 5 requests/s from the first instant (runs out within a second or two).
// Enforcement error = (tokens settled in the window − L) / L: positive is overshoot, negative is
// budget left unused although demand was there. Side by side: fair delta scheduling (default)
// against a fixed order (phase A's), and the share rule on against the cluster sum alone.
//
// Bytes: what the counters add to gossip per agent per second: every budget datagram, its
// envelope and HMAC included (agent/gossip/wire.ts envelopeOverhead).
//
// Signed (--signed on): every counter carries its origin's Ed25519 signature and every receiver
// verifies it (agent/budget/signing.ts), as agents riding on gossip do; real keys, real signatures.
//
//   node bench/budget.ts [--sizes 10,100,1000] [--seconds 8] [--scenarios steady,burst] [--share on,off] [--fair on,off] [--signed off,on]
// (1,000 agents take minutes per run: the options run parts, e.g. in parallel on two cores)
import { mkdirSync, writeFileSync } from 'node:fs';
import { BudgetExchange } from '../agent/budget/exchange.ts';
import { BudgetLedger, type Reservation } from '../agent/budget/ledger.ts';
import type { BudgetLimit } from '../agent/budget/limits.ts';
import type { CounterKeys } from '../agent/budget/signing.ts';
import { OriginSigner } from '../agent/gossip/signatures.ts';
import { envelopeOverhead } from '../agent/gossip/wire-size.ts';
import { mulberry32, type Rand } from '../shared/sim/random.ts';

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : fallback;
}

const STEP_MS = 10;
const INTERVAL_MS = 200;
const FANOUT = 3;
const LATENCY_MS = [1, 5];
const CONVERGENCE_MS = 1000; // what the agent sets at a 200 ms gossip interval (agent/agent.ts)
const BOOT = 1768471200000;
const DATAGRAM = 1400;
/** The budget bytes one datagram holds: the datagram less the envelope, less Payload.budget's own tag and length. */
const MAX_BYTES = DATAGRAM - envelopeOverhead('node-999', BOOT) - 3;
const MAX_MESSAGES_PER_ANSWER = 4;
const LIMIT_TOKENS = 1_000_000;
const ESTIMATE = 1000;
const WINDOW_START = Date.UTC(2026, 0, 15, 10, 0, 0);
const LIMITS: BudgetLimit[] = [{ window: 'minute', tokens: LIMIT_TOKENS }];

type Scenario = 'steady' | 'burst';

interface Message {
  to: number;
  from: number;
  bytes: Uint8Array;
}

interface Row {
  agents: number;
  scenario: Scenario;
  shareRule: boolean;
  fair: boolean;
  signed: boolean;
  settledTokens: number;
  errorPct: number;
  admitted: number;
  refused: number;
  bytesPerAgentPerSec: number;
  datagramsPerAgentPerSec: number;
  wallSeconds: number;
  signsPerAgentPerSec: number;
  checksPerAgentPerSec: number;
}

function run(n: number, scenario: Scenario, shareRule: boolean, fair: boolean, seconds: number, signed: boolean): Row {
  const started = performance.now();
  const signers = signed ? Array.from({ length: n }, () => new OriginSigner()) : [];
  // Agents are node-i, all of one incarnation (BOOT): a key by node.
  const keyOf = (node: string) => signers[Number(node.slice('node-'.length))]?.key;
  const keysOf = (i: number): CounterKeys | undefined =>
    signed ? { of: keyOf, sign: (m) => signers[i].sign(m) } : undefined;
  const rand: Rand = mulberry32(n * 7919 + (scenario === 'burst' ? 1 : 0) + (shareRule ? 2 : 0));
  let now = WINDOW_START;
  const agents = Array.from({ length: n }, (_, i) => {
    const ledger: BudgetLedger = new BudgetLedger({
      origin: `node-${i}#${BOOT}`,
      now: () => now,
      convergenceMs: CONVERGENCE_MS,
      warmupMs: 0,
      pendingTtlMs: 60_000,
      maxCounters: 100_000,
      maxOrigins: 4096,
      shareRule,
      rand,
      // Called only once both exist: the slow start's N is what the exchange heard from gossip.
      agents: () => exchange.agents,
      sweeps: () => exchange.sweeps,
    });
    ledger.markSynced();
    const exchange: BudgetExchange = new BudgetExchange({
      ledger,
      maxMessagesPerAnswer: MAX_MESSAGES_PER_ANSWER,
      fair,
      signed,
    });
    // A running cluster: gossip membership already knows all N before the burst (an agent of a
    // real one is synced only after gossip rounds, so it never spends believing it is alone).
    exchange.round(n, undefined, keysOf(i));
    return { ledger, exchange, phase: Math.floor(rand() * (INTERVAL_MS / STEP_MS)), credit: 0 };
  });
  // Messages and settles due at each step.
  const inbox = new Map<number, Message[]>();
  const settles = new Map<number, { agent: number; reservation: Reservation; tokens: number }[]>();
  const due = <T>(map: Map<number, T[]>, step: number, item: T) => {
    const list = map.get(step) ?? [];
    list.push(item);
    map.set(step, list);
  };
  const datagramOverhead = DATAGRAM - MAX_BYTES;
  let bytes = 0;
  let datagrams = 0;
  let admitted = 0;
  let refused = 0;
  let settledTokens = 0;
  const latencySteps = () =>
    Math.max(1, Math.round((LATENCY_MS[0] + rand() * (LATENCY_MS[1] - LATENCY_MS[0])) / STEP_MS));
  const send = (step: number, m: Message) => {
    bytes += m.bytes.length + datagramOverhead;
    datagrams++;
    due(inbox, step + latencySteps(), m);
  };

  // Offered requests per agent per step.
  const perAgentPerStep =
    scenario === 'steady' ? (LIMIT_TOKENS / 3 / 750 / n) * (STEP_MS / 1000) : 5 * (STEP_MS / 1000);
  const steps = (seconds * 1000) / STEP_MS;
  for (let step = 0; step < steps; step++) {
    now = WINDOW_START + step * STEP_MS;
    // Every message is handled the same way: merge, and the replies go back to its sender.
    for (const m of inbox.get(step) ?? []) {
      for (const reply of agents[m.to].exchange.receive(m.bytes, MAX_BYTES))
        send(step, { to: m.from, from: m.to, bytes: reply });
    }
    inbox.delete(step);
    for (const s of settles.get(step) ?? []) {
      agents[s.agent].ledger.settle(s.reservation, s.tokens);
      settledTokens += s.tokens;
    }
    settles.delete(step);
    for (let i = 0; i < n; i++) {
      const agent = agents[i];
      if (step % (INTERVAL_MS / STEP_MS) === agent.phase) {
        agent.exchange.round(n, undefined, keysOf(i));
        for (let f = 0; f < Math.min(FANOUT, n - 1); f++) {
          let peer = Math.floor(rand() * (n - 1));
          if (peer >= i) peer++;
          const ask = agent.exchange.ask(MAX_BYTES);
          if (ask) send(step, { to: peer, from: i, bytes: ask });
        }
      }
      agent.credit += perAgentPerStep;
      while (agent.credit >= 1 || (agent.credit > 0 && rand() < agent.credit)) {
        agent.credit -= 1;
        const admission = agent.ledger.reserve('team-batch', 'bedrock', ESTIMATE, LIMITS);
        if (!admission.ok) {
          refused++;
          continue;
        }
        admitted++;
        const tokens = 400 + 100 + Math.floor(rand() * 501);
        due(settles, step + Math.round((1000 + rand() * 2000) / STEP_MS), {
          agent: i,
          reservation: admission.reservation,
          tokens,
        });
      }
      if (agent.credit < 0) agent.credit = 0;
    }
  }
  // Requests still in flight settle with what they use (inside the window: it is a minute).
  for (const list of settles.values()) for (const s of list) settledTokens += s.tokens;
  return {
    agents: n,
    scenario,
    shareRule,
    fair,
    signed,
    settledTokens,
    errorPct: Math.round(((settledTokens - LIMIT_TOKENS) / LIMIT_TOKENS) * 10_000) / 100,
    admitted,
    refused,
    bytesPerAgentPerSec: Math.round(bytes / n / seconds),
    datagramsPerAgentPerSec: Math.round((datagrams / n / seconds) * 10) / 10,
    wallSeconds: Math.round((performance.now() - started) / 100) / 10,
    // Per agent per second (signed runs): Ed25519 signatures made and checked.
    signsPerAgentPerSec: Math.round(agents.reduce((s, a) => s + a.exchange.signatures.made, 0) / n / seconds),
    checksPerAgentPerSec: Math.round(agents.reduce((s, a) => s + a.exchange.signatures.checked, 0) / n / seconds),
  };
}

const sizes = arg('sizes', '10,100,1000').split(',').map(Number);
// Long enough for the budget to run out and every request admitted to settle (the window is a minute).
const seconds = Number(arg('seconds', '8'));
const rows: Row[] = [];
const scenarios = arg('scenarios', 'steady,burst').split(',') as Scenario[];
const onOff = (name: string, fallback: string) =>
  arg(name, fallback)
    .split(',')
    .map((v) => v === 'on');
const shares = onOff('share', 'on');
const fairs = onOff('fair', 'on,off');
const signeds = onOff('signed', 'off');
for (const n of sizes) {
  for (const scenario of scenarios) {
    for (const shareRule of shares) {
      for (const fair of fairs) {
        for (const signed of signeds) {
          const row = run(n, scenario, shareRule, fair, seconds, signed);
          rows.push(row);
          console.error(JSON.stringify(row));
        }
      }
    }
  }
}

const sign = (x: number) => `${x > 0 ? '+' : ''}${x}%`;
const table = [
  '| agents | scenario | share rule | delta order | counters | tokens settled (limit 1,000,000) | enforcement error | admitted / refused | budget gossip per agent: bytes/s, datagrams/s |',
  '| ---: | --- | --- | --- | --- | ---: | ---: | ---: | ---: |',
  ...rows.map(
    (r) =>
      `| ${r.agents} | ${r.scenario} | ${r.shareRule ? 'on' : 'off'} | ${r.fair ? 'fair' : 'fixed'} | ${r.signed ? 'signed' : 'unsigned'} | ${r.settledTokens.toLocaleString('en-US')} | ${sign(r.errorPct)} | ${r.admitted} / ${r.refused} | ${r.bytesPerAgentPerSec.toLocaleString('en-US')}, ${r.datagramsPerAgentPerSec} |`,
  ),
].join('\n');
const results = {
  bench: 'budget',
  node: process.version,
  settings: {
    stepMs: STEP_MS,
    intervalMs: INTERVAL_MS,
    fanout: FANOUT,
    latencyMs: LATENCY_MS,
    convergenceMs: CONVERGENCE_MS,
    maxBytes: MAX_BYTES,
    maxMessagesPerAnswer: MAX_MESSAGES_PER_ANSWER,
    limitTokensPerMinute: LIMIT_TOKENS,
    estimate: ESTIMATE,
    seconds,
  },
  rows,
};
const custom = process.argv.length > 2;
const file = custom ? `./results/budget-${Date.now()}.json` : './results/budget.json';
mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
writeFileSync(new URL(file, import.meta.url), JSON.stringify(results, null, 2) + '\n');
console.log(table);
console.log(`\n(results in bench/${file.slice(2)})`);
