// Overflow budget enforcement at 10, 100 and 1,000 agents, in virtual time.
//
// Every agent is a real BudgetLedger; they exchange counters by push-pull anti-entropy with the
// gossip bench's parameters (a round every 200 ms to 3 random peers, 1–5 ms one-way latency,
// bench/gossip.ts measured ≈ 0.7 s to reach 99.9% of 1,000 agents), every message encoded and
// decoded with the real wire format (shared/proto/budget.proto), cut to a datagram's worth.
//
// One tenant overflows through EVERY agent at once (the worst case: each agent is blind to the
// others' last admissions) against a limit of L tokens per minute. Each request reserves its
// estimate (prompt 400 + max_tokens 600 = 1,000) and settles 1–3 s later with what the provider
// reports (400 + 100..600 completion). Scenarios:
//   steady: the cluster offers L every 3 s, spread over all agents (budget runs out after ~4 s);
//   burst:  every agent offers 5 requests/s from the first instant (runs out within a second or two).
// Enforcement error = (tokens settled in the window − L) / L: positive is overshoot, negative is
// budget left unused although demand was there. Both with the share rule (default) and without
// (enforcement on the cluster sum alone), side by side.
//
// Bytes: what the counters add per agent per second, deltas (the part that rides inside gossip's
// own exchange once wired: gossip's digest already carries each origin's version) and the
// standalone digests this simulation also sends.
//
//   node bench/budget.ts [--sizes 10,100,1000] [--seconds 8] [--scenarios steady,burst] [--share on,off]
// (1,000 agents take minutes per run: the options run parts, e.g. in parallel on two cores)
import { mkdirSync, writeFileSync } from 'node:fs';
import { BudgetLedger, type Reservation } from '../agent/budget/ledger.ts';
import type { BudgetLimit } from '../agent/budget/limits.ts';
import { applyBudgetDeltas, budgetDeltasFor, budgetDigest } from '../agent/budget/exchange.ts';
import { decodeBudgetGossip, encodeBudgetGossip } from '../agent/budget/wire.ts';
import { mulberry32, type Rand } from '../shared/sim/random.ts';

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : fallback;
}

const STEP_MS = 10;
const INTERVAL_MS = 200;
const FANOUT = 3;
const LATENCY_MS = [1, 5];
const CONVERGENCE_MS = 1000; // ≥ gossip's measured 99.9% propagation at 1,000 agents (≈ 0.7 s)
const MAX_COUNTERS_PER_MESSAGE = 40; // ≈ 1,400 bytes of counters
const LIMIT_TOKENS = 1_000_000;
const ESTIMATE = 1000;
const WINDOW_START = Date.UTC(2026, 0, 15, 10, 0, 0);
const LIMITS: BudgetLimit[] = [{ window: 'minute', tokens: LIMIT_TOKENS }];

type Scenario = 'steady' | 'burst';

interface Message {
  to: number;
  from: number;
  kind: 'ask' | 'answer' | 'push';
  bytes: Uint8Array;
}

interface Row {
  agents: number;
  scenario: Scenario;
  shareRule: boolean;
  settledTokens: number;
  errorPct: number;
  admitted: number;
  refused: number;
  deltaBytesPerAgentPerSec: number;
  digestBytesPerAgentPerSec: number;
  wallSeconds: number;
}

function run(n: number, scenario: Scenario, shareRule: boolean, seconds: number): Row {
  const started = performance.now();
  const rand: Rand = mulberry32(n * 7919 + (scenario === 'burst' ? 1 : 0) + (shareRule ? 2 : 0));
  let now = WINDOW_START;
  const agents = Array.from({ length: n }, (_, i) => {
    const ledger = new BudgetLedger({
      origin: `node-${i}#1768471200000`,
      now: () => now,
      convergenceMs: CONVERGENCE_MS,
      warmupMs: 0,
      pendingTtlMs: 60_000,
      maxCounters: 100_000,
      maxOrigins: 4096,
      shareRule,
      agents: () => n,
    });
    ledger.markSynced();
    return {
      ledger,
      phase: Math.floor(rand() * (INTERVAL_MS / STEP_MS)),
      credit: 0,
      digest: { revision: -1, bytes: new Uint8Array() },
    };
  });
  // Messages and settles due at each step.
  const inbox = new Map<number, Message[]>();
  const settles = new Map<number, { agent: number; reservation: Reservation; tokens: number }[]>();
  const due = <T>(map: Map<number, T[]>, step: number, item: T) => {
    const list = map.get(step) ?? [];
    list.push(item);
    map.set(step, list);
  };
  let deltaBytes = 0;
  let digestBytes = 0;
  let admitted = 0;
  let refused = 0;
  let settledTokens = 0;
  const latencySteps = () =>
    Math.max(1, Math.round((LATENCY_MS[0] + rand() * (LATENCY_MS[1] - LATENCY_MS[0])) / STEP_MS));
  const send = (step: number, m: Message) => due(inbox, step + latencySteps(), m);
  const deltasMessage = (from: number, digest: ReadonlyMap<number, number>) => {
    const deltas = budgetDeltasFor(agents[from].ledger, digest, MAX_COUNTERS_PER_MESSAGE);
    if (deltas.length === 0) return undefined;
    const bytes = encodeBudgetGossip({ deltas });
    deltaBytes += bytes.length;
    return bytes;
  };
  const digestMessage = (from: number) => {
    // Encoded again only when the ledger changed (the bytes would be the same).
    const { ledger, digest } = agents[from];
    if (digest.revision !== ledger.revision)
      Object.assign(digest, {
        revision: ledger.revision,
        bytes: encodeBudgetGossip({ digest: budgetDigest(ledger), deltas: [] }),
      });
    digestBytes += digest.bytes.length;
    return digest.bytes;
  };

  // Offered requests per agent per step.
  const perAgentPerStep =
    scenario === 'steady' ? (LIMIT_TOKENS / 3 / 750 / n) * (STEP_MS / 1000) : 5 * (STEP_MS / 1000);
  const steps = (seconds * 1000) / STEP_MS;
  for (let step = 0; step < steps; step++) {
    now = WINDOW_START + step * STEP_MS;
    for (const m of inbox.get(step) ?? []) {
      const message = decodeBudgetGossip(m.bytes);
      const target = agents[m.to].ledger;
      applyBudgetDeltas(target, message.deltas);
      if (m.kind === 'ask') {
        // Answer with what the asker lacks, and ask back (push-pull).
        const answer = deltasMessage(m.to, message.digest!);
        send(step, {
          to: m.from,
          from: m.to,
          kind: 'answer',
          bytes: answer ? concat(answer, digestMessage(m.to)) : digestMessage(m.to),
        });
      } else if (m.kind === 'answer' && message.digest) {
        const push = deltasMessage(m.to, message.digest);
        if (push) send(step, { to: m.from, from: m.to, kind: 'push', bytes: push });
      }
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
        agent.ledger.prune();
        for (let f = 0; f < FANOUT; f++) {
          let peer = Math.floor(rand() * (n - 1));
          if (peer >= i) peer++;
          send(step, { to: peer, from: i, kind: 'ask', bytes: digestMessage(i) });
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
    settledTokens,
    errorPct: Math.round(((settledTokens - LIMIT_TOKENS) / LIMIT_TOKENS) * 10_000) / 100,
    admitted,
    refused,
    deltaBytesPerAgentPerSec: Math.round(deltaBytes / n / seconds),
    digestBytesPerAgentPerSec: Math.round(digestBytes / n / seconds),
    wallSeconds: Math.round((performance.now() - started) / 100) / 10,
  };
}

/** Two encoded BudgetGossip messages as one: protobuf concatenation merges repeated fields. */
function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

const sizes = arg('sizes', '10,100,1000').split(',').map(Number);
// Long enough for the budget to run out and every request admitted to settle (the window is a minute).
const seconds = Number(arg('seconds', '8'));
const rows: Row[] = [];
const scenarios = arg('scenarios', 'steady,burst').split(',') as Scenario[];
const shares = arg('share', 'on,off')
  .split(',')
  .map((v) => v === 'on');
for (const n of sizes) {
  for (const scenario of scenarios) {
    for (const shareRule of shares) {
      const row = run(n, scenario, shareRule, seconds);
      rows.push(row);
      console.error(JSON.stringify(row));
    }
  }
}

const table = [
  '| agents | scenario | share rule | tokens settled (limit 1,000,000) | enforcement error | admitted / refused | counter bytes/agent/s: deltas + digests |',
  '| ---: | --- | --- | ---: | ---: | ---: | ---: |',
  ...rows.map(
    (r) =>
      `| ${r.agents} | ${r.scenario} | ${r.shareRule ? 'on' : 'off'} | ${r.settledTokens.toLocaleString('en-US')} | ${r.errorPct > 0 ? '+' : ''}${r.errorPct}% | ${r.admitted} / ${r.refused} | ${r.deltaBytesPerAgentPerSec} + ${r.digestBytesPerAgentPerSec} |`,
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
