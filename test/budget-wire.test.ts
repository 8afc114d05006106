import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BudgetLedger, type Admission, type Reservation } from '../agent/budget/ledger.ts';
import { BudgetExchange } from '../agent/budget/exchange.ts';
import { budgetOriginId, BudgetWireError, decodeBudgetGossip, encodeBudgetGossip } from '../agent/budget/wire.ts';
import type { BudgetLimit } from '../agent/budget/limits.ts';

const T0 = Date.UTC(2026, 0, 15, 10, 0, 30);
const LIMITS: BudgetLimit[] = [{ window: 'hour', tokens: 1_000_000 }];

function ledger(origin: string, now: () => number): BudgetLedger {
  return new BudgetLedger({
    origin,
    now,
    convergenceMs: 2000,
    warmupMs: 0,
    pendingTtlMs: 60_000,
    maxCounters: 10_000,
    maxOrigins: 100,
  });
}

function reserved(a: Admission): Reservation {
  assert.ok(a.ok);
  return a.reservation;
}

/** A asks B (digest + A's own counters), B answers with what A lacks, A answers what B asked back: the real exchange and encoding. */
function exchange(asker: BudgetLedger, answerer: BudgetLedger, maxBytes = 1300): number {
  const a = new BudgetExchange({ ledger: asker, maxMessagesPerAnswer: 1 });
  const b = new BudgetExchange({ ledger: answerer, maxMessagesPerAnswer: 1 });
  const ask = a.ask(maxBytes);
  if (!ask) return 0;
  let bytes = 0;
  for (const answer of b.receive(ask, maxBytes)) {
    bytes += answer.length;
    for (const back of a.receive(answer, maxBytes)) b.receive(back, maxBytes);
  }
  return bytes;
}

test('counters travel through the protobuf encoding unchanged, and a cut delta continues where it stopped', () => {
  let t = T0;
  const now = () => t;
  const a = ledger('node-a#1', now);
  const b = ledger('node-b#1', now);
  for (let i = 0; i < 20; i++) {
    t += 50;
    a.settle(reserved(a.reserve(`tenant-${i % 5}`, i % 2 ? 'bedrock' : 'databricks', 700, LIMITS)), 650 + i);
  }
  a.reserve('tenant-0', 'bedrock', 4000, LIMITS); // pending
  exchange(b, a, 200); // a small datagram's worth only
  assert.ok(b.versions().get('node-a#1')! < a.versions().get('node-a#1')!);
  while (b.versions().get('node-a#1')! < a.versions().get('node-a#1')!) exchange(b, a, 200);
  for (const tenant of ['tenant-0', 'tenant-1', 'tenant-4']) {
    for (const window of ['minute', 'hour', 'day'] as const)
      assert.deepEqual(b.spent(tenant, window), a.spent(tenant, window));
    assert.deepEqual(b.state(tenant, LIMITS), a.state(tenant, LIMITS));
  }
  assert.deepEqual(b.deltaSince('node-a#1', 0), a.deltaSince('node-a#1', 0), 'every field, the change time included');
});

test('malformed messages are errors, never crashes or silent garbage', () => {
  assert.throws(() => decodeBudgetGossip(Uint8Array.of(0x0a, 0xff, 0xff)), BudgetWireError);
  const counter = {
    tenant: 't',
    provider: 'p',
    window: 'hour' as const,
    epoch: 1,
    tokens: 1,
    requests: 1,
    pendingTokens: 0,
    pendingRequests: 0,
    version: 5,
    changedAt: 3_600_000,
  };
  const outside = encodeBudgetGossip({ deltas: [{ origin: 'x#1', from: 0, to: 3, counters: [counter] }] });
  assert.throws(() => decodeBudgetGossip(outside), /outside its versions/);
  const backwards = encodeBudgetGossip({ deltas: [{ origin: 'x#1', from: 4, to: 3, counters: [] }] });
  assert.throws(() => decodeBudgetGossip(backwards), /backwards/);
  const noOrigin = encodeBudgetGossip({ deltas: [{ origin: '', from: 0, to: 5, counters: [counter] }] });
  assert.throws(() => decodeBudgetGossip(noOrigin), /origin/);
});

test("one agent's counters for a tenant on one provider take a few dozen bytes", () => {
  const t = T0;
  const a = ledger('node-a#1764560000000', () => t);
  const b = ledger('node-b#1764560000000', () => t);
  a.settle(reserved(a.reserve('team-batch', 'bedrock', 1500, LIMITS)), 1432);
  const bytes = exchange(b, a);
  // minute, hour and day counters + origin name + two names: 112 bytes when written; the bound guards against a format regression.
  assert.ok(bytes <= 128, `${bytes} bytes`);
});

test('a delta after version 0 carries its origin id, not its name: resolved from the origins held, else left out', () => {
  const counter = {
    tenant: 'team-a',
    provider: 'bedrock',
    window: 'hour' as const,
    epoch: Math.floor(T0 / 3_600_000),
    tokens: 10,
    requests: 1,
    pendingTokens: 0,
    pendingRequests: 0,
    version: 7,
    changedAt: T0,
  };
  const later = encodeBudgetGossip({
    deltas: [{ origin: 'node-a#1764560000000', from: 5, to: 7, counters: [counter] }],
  });
  const first = encodeBudgetGossip({
    deltas: [{ origin: 'node-a#1764560000000', from: 0, to: 7, counters: [counter] }],
  });
  assert.ok(later.length <= first.length - 'node-a#1764560000000'.length, `${later.length} vs ${first.length} bytes`);
  const held = (id: number) => (id === budgetOriginId('node-a#1764560000000') ? 'node-a#1764560000000' : undefined);
  assert.deepEqual(decodeBudgetGossip(later, held).deltas[0].counters, [counter]);
  const unheld = decodeBudgetGossip(later);
  assert.deepEqual([unheld.deltas.length, unheld.unknown], [0, 1]);
});
