// Budget counters a holder of the cluster key could forge: a counter of 2^53-1 tokens that would
// block a tenant's overflow cluster-wide for the window, and thousands of made-up origins that
// would fill the store and push out a real agent's spending. Both are dropped and counted.
import { describe, it, test } from 'node:test';
import assert from 'node:assert/strict';
import { BudgetExchange } from '../agent/budget/exchange.ts';
import { BudgetLedger } from '../agent/budget/ledger.ts';
import type { BudgetLimit } from '../agent/budget/limits.ts';
import { counterMessage } from '../agent/budget/signing.ts';
import { decodeBudgetGossip, encodeBudgetGossip } from '../agent/budget/wire.ts';
import { OriginSigner } from '../agent/gossip/signatures.ts';
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

// Signed counters (agent/budget/signing.ts): a holder of the cluster key, even one with a trusted
// gossip key of its own, cannot rewrite another origin's counters or jump its version.
describe('budget counters signed by their origin', () => {
  const signers = { a: new OriginSigner(), b: new OriginSigner(), m: new OriginSigner() };
  const keyOf = new Map([
    ['node-a#1', signers.a.key],
    ['node-b#1', signers.b.key],
    ['node-m#1', signers.m.key],
  ]);
  const alive = (node: string, incarnation: number) => keyOf.has(`${node}#${incarnation}`);
  const keys = (signer: OriginSigner) => ({
    of: (node: string, incarnation: number) => keyOf.get(`${node}#${incarnation}`),
    sign: (message: Buffer) => signer.sign(message),
  });

  function signedAgent(origin: string, signer: OriginSigner) {
    const { ledger } = agent(origin);
    const exchange = new BudgetExchange({ ledger, maxMessagesPerAnswer: 2, signed: true });
    exchange.round(3, alive, keys(signer));
    return { ledger, exchange };
  }

  const spend = (n: { ledger: BudgetLedger }, tokens: number) => {
    const r = n.ledger.reserve('team-a', 'bedrock', tokens, HOUR);
    assert.ok(r.ok);
    n.ledger.settle(r.reservation, tokens);
  };

  const heldOf = (n: { ledger: BudgetLedger }, origin: string) =>
    n.ledger.deltaSince(origin, 0).find((c) => c.window === 'hour')?.tokens;

  it("refuses another origin's counters rewritten by a key holder, and the genuine ones still replace them", () => {
    const a = signedAgent('node-a#1', signers.a);
    const b = signedAgent('node-b#1', signers.b);
    spend(b, 1000);
    a.exchange.receive(b.exchange.ask(DATAGRAM)!, DATAGRAM);
    assert.equal(heldOf(a, 'node-b#1'), 1000, "B's signed counters were not taken");

    // The forger relays B's delta with its counters rewritten (a spent tenant's budget "unspent",
    // or spent): B's signatures no longer match, and its own key is not B's.
    const genuine = decodeBudgetGossip(b.exchange.ask(DATAGRAM)!).deltas[0];
    const version = genuine.to + 1;
    const rewritten = genuine.counters.map((c) => ({ ...c, tokens: 999_950, version }));
    a.exchange.receive(encodeBudgetGossip({ deltas: [{ ...genuine, to: version, counters: rewritten }] }), DATAGRAM);
    const resigned = rewritten.map((c) => ({ ...c, signature: signers.m.sign(counterMessage('node-b#1', c)) }));
    a.exchange.receive(encodeBudgetGossip({ deltas: [{ ...genuine, to: version, counters: resigned }] }), DATAGRAM);
    // Nor can it push B's version past B's real counters without them (nothing at `to` backs it).
    const held = a.ledger.versions().get('node-b#1')!;
    a.exchange.receive(
      encodeBudgetGossip({ deltas: [{ origin: 'node-b#1', from: held, to: held + 1000, counters: [] }] }),
      DATAGRAM,
    );
    assert.equal(a.exchange.unsigned, 3);
    assert.equal(heldOf(a, 'node-b#1'), 1000, 'a rewritten counter was taken');
    assert.equal(a.ledger.versions().get('node-b#1'), held, "B's version was moved by a forger");

    // B's next genuine change still arrives (the forgeries took no version from it).
    spend(b, 500);
    a.exchange.receive(b.exchange.ask(DATAGRAM)!, DATAGRAM);
    assert.equal(heldOf(a, 'node-b#1'), 1500);
  });

  it("relays keep the signatures: a third agent takes B's counters from A, as B signed them", () => {
    const a = signedAgent('node-a#1', signers.a);
    const b = signedAgent('node-b#1', signers.b);
    const m = signedAgent('node-m#1', signers.m);
    spend(b, 700);
    spend(m, 10);
    a.exchange.receive(b.exchange.ask(DATAGRAM)!, DATAGRAM);
    // M asks A (a digest without B): A answers with B's counters as B signed them.
    for (const answer of a.exchange.receive(m.exchange.ask(DATAGRAM)!, DATAGRAM)) m.exchange.receive(answer, DATAGRAM);
    assert.equal(heldOf(m, 'node-b#1'), 700);
    assert.equal(m.exchange.unsigned, 0);
  });
});
