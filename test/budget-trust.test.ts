// Budget counters a holder of the cluster key could forge: a counter of 2^53-1 tokens that would
// block a tenant's overflow cluster-wide for the window, and thousands of made-up origins that
// would fill the store and push out a real agent's spending. Both are dropped and counted.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BudgetExchange } from '../agent/budget/exchange.ts';
import { BudgetLedger } from '../agent/budget/ledger.ts';
import type { BudgetLimit } from '../agent/budget/limits.ts';
import { encodeBudgetGossip } from '../agent/budget/wire.ts';
import type { Counter } from '../agent/budget/counter-store.ts';

const T0 = Date.UTC(2026, 0, 15, 10, 0, 30);
const DATAGRAM = 1300;
const HOUR: BudgetLimit[] = [{ window: 'hour', tokens: 1_000_000 }];

function agent(origin: string, maxOrigins = 64) {
  const ledger = new BudgetLedger({
    origin,
    now: () => T0,
    convergenceMs: 1000,
    warmupMs: 0,
    pendingTtlMs: 60_000,
    maxCounters: 1000,
    maxOrigins,
  });
  ledger.markSynced();
  return { ledger, exchange: new BudgetExchange({ ledger, maxMessagesPerAnswer: 2 }) };
}

function counter(tokens: number, version = 1): Counter {
  return {
    tenant: 'team-a',
    provider: 'bedrock',
    window: 'hour',
    epoch: Math.floor(T0 / 3_600_000),
    tokens,
    requests: 1,
    pendingTokens: 0,
    pendingRequests: 0,
    version,
    changedAt: T0 - 1000,
  };
}

const push = (origin: string, counters: Counter[]) =>
  encodeBudgetGossip({ deltas: [{ origin, from: 0, to: counters.at(-1)!.version, counters }] });

test("drops a counter beyond what its origin could have spent, and the tenant's overflow goes on", () => {
  const a = agent('node-a#1');
  const alive = new Set(['node-b#1']);
  a.exchange.round(2, (node, incarnation) => alive.has(`${node}#${incarnation}`));
  a.exchange.receive(push('node-b#1', [counter(2 ** 53 - 1)]), DATAGRAM);
  assert.equal(a.ledger.dropped, 1);
  assert.ok(a.ledger.reserve('team-a', 'bedrock', 100, HOUR).ok, 'one absurd counter blocked the tenant');
  // A believable one still counts.
  a.exchange.receive(push('node-b#1', [counter(999_950, 2)]), DATAGRAM);
  assert.equal(a.ledger.reserve('team-a', 'bedrock', 100, HOUR).ok, false);
});

test('counters of origins gossip does not vouch for take no room: a real agent still counts', () => {
  const a = agent('node-a#1', 64);
  const alive = new Set(['node-b#1']);
  a.exchange.round(2, (node, incarnation) => alive.has(`${node}#${incarnation}`));
  for (let i = 0; i < 4200; i++) a.exchange.receive(push(`fake-${i}#1`, [counter(10)]), DATAGRAM);
  assert.equal(a.ledger.size.origins, 1);
  assert.equal(a.ledger.dropped, 4200);
  a.exchange.receive(push('node-b#1', [counter(999_950)]), DATAGRAM);
  assert.equal(a.ledger.size.origins, 2);
  assert.equal(a.ledger.reserve('team-a', 'bedrock', 100, HOUR).ok, false, "the real agent's spending was lost");
});

test("a restarted peer's earlier incarnation still counts, on the word of its live one; made-up ones do not pile up", () => {
  const a = agent('node-a#1', 64);
  const alive = new Set(['node-b#5']);
  a.exchange.round(2, (node, incarnation) => alive.has(`${node}#${incarnation}`));
  a.exchange.receive(push('node-b#5', [counter(10)]), DATAGRAM);
  a.exchange.receive(push('node-b#4', [counter(999_950)]), DATAGRAM);
  assert.equal(a.ledger.reserve('team-a', 'bedrock', 100, HOUR).ok, false, 'the earlier incarnation was not counted');
  for (let i = 0; i < 100; i++) a.exchange.receive(push(`node-b#${i / 1000}`, [counter(1)]), DATAGRAM);
  assert.ok(a.ledger.size.origins <= 1 + 4, `${a.ledger.size.origins} origins held`);
  // Earlier incarnations of a node with no live origin are refused.
  a.exchange.receive(push('node-z#1', [counter(1)]), DATAGRAM);
  assert.ok(!a.ledger.versions().has('node-z#1'));
});
