// The budget counters' anti-entropy exchange (agent/budget/exchange.ts), pure: what an agent asks,
// what a peer answers when a datagram cannot carry everything, when a new agent counts as synced,
// and what an agent that has not heard the cluster admits.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BudgetExchange } from '../agent/budget/exchange.ts';
import { BudgetLedger, type LedgerOptions } from '../agent/budget/ledger.ts';
import type { BudgetLimit } from '../agent/budget/limits.ts';
import { decodeBudgetGossip } from '../agent/budget/wire.ts';

const T0 = Date.UTC(2026, 0, 15, 10, 0, 30);
const DATAGRAM = 1300;
// Every window counted: a spend changes three counters (the most gossip a spend can cause).
const EVERY_WINDOW: BudgetLimit[] = (['minute', 'hour', 'day'] as const).map((window) => ({
  window,
  tokens: 1_000_000,
}));

function node(origin: string, now: () => number, options: Partial<LedgerOptions> & { fair?: boolean } = {}) {
  const ledger = new BudgetLedger({
    origin,
    now,
    convergenceMs: 1000,
    warmupMs: 3000,
    pendingTtlMs: 60_000,
    maxCounters: 100_000,
    maxOrigins: 4096,
    agents: () => exchange.agents,
    ...options,
  });
  const exchange: BudgetExchange = new BudgetExchange({ ledger, maxMessagesPerAnswer: 2, fair: options.fair });
  return { ledger, exchange };
}

type Node = ReturnType<typeof node>;

/** One exchange as gossip runs it: asker → answerer → asker → answerer; returns the ask and the answer's messages. */
function exchange(asker: Node, answerer: Node): { ask?: Uint8Array; answers: Uint8Array[] } {
  const ask = asker.exchange.ask(DATAGRAM);
  if (!ask) return { answers: [] };
  const answers = answerer.exchange.receive(ask, DATAGRAM);
  for (const answer of answers)
    for (const back of asker.exchange.receive(answer, DATAGRAM)) answerer.exchange.receive(back, DATAGRAM);
  return { ask, answers };
}

function spend(n: Node, tenant: string, tokens: number): void {
  const a = n.ledger.reserve(tenant, 'bedrock', tokens, EVERY_WINDOW);
  assert.ok(a.ok, a.ok ? '' : a.message);
  n.ledger.settle(a.reservation, tokens);
}

/** `count` synced agents that each spent once: the cluster a newcomer joins. */
function cluster(count: number, now: () => number, options: { fair?: boolean } = {}): Node[] {
  return Array.from({ length: count }, (_, i) => {
    const n = node(`node-${i}#1`, now, options);
    n.ledger.markSynced();
    spend(n, 'team-a', 100 + i);
    return n;
  });
}

test('an agent with nothing counted and in sync says nothing; one that has not synced asks until a peer answered in full', () => {
  const t = T0;
  const quiet = node('quiet#1', () => t);
  quiet.ledger.markSynced();
  assert.equal(quiet.exchange.ask(DATAGRAM), undefined, 'budgets unused: gossip carries no budget bytes');

  const peer = node('peer#1', () => t);
  peer.ledger.markSynced();
  spend(peer, 'team-a', 500);
  const fresh = node('fresh#1', () => t);
  assert.equal(fresh.ledger.synced, false);
  const { answers } = exchange(fresh, peer);
  assert.equal(decodeBudgetGossip(answers[0]).complete, true);
  assert.equal(fresh.ledger.synced, true);
  assert.equal(fresh.ledger.spent('team-a', 'hour').tokens, 500);
});

test('a newcomer to 600 agents syncs shard by shard (a digest of every origin does not fit a datagram) and then sees the exact sum', () => {
  const t = T0;
  const agents = cluster(600, () => t);
  const peer = node('peer#1', () => t);
  peer.ledger.markSynced();
  for (const a of agents) exchange(a, peer); // the peer hears everyone (each pushes its own counters)
  const total = agents.reduce((sum, _, i) => sum + 100 + i, 0);
  assert.equal(peer.ledger.spent('team-a', 'hour').tokens, total);

  const fresh = node('fresh#1', () => t);
  let exchanges = 0;
  let sharded = false;
  while (!fresh.ledger.synced) {
    const { ask } = exchange(fresh, peer);
    sharded ||= decodeBudgetGossip(ask!).digest!.shards > 0;
    assert.ok(++exchanges < 40, `synced within 40 exchanges (held ${fresh.ledger.size.origins} origins)`);
  }
  assert.ok(sharded, 'the digest went by shards once it no longer fit');
  assert.equal(fresh.ledger.spent('team-a', 'hour').tokens, total, 'synced: it sees every origin the peer saw');
});

test('fair scheduling: when every origin keeps changing and answers are cut, every origin still gets through; a fixed order starves the later ones', () => {
  const ROUNDS = 30;
  /** How many rounds behind the listener is on each origin at the end (a spend is 6 versions: 3 counters reserved, then settled). */
  const lagRounds = (fair: boolean): number[] => {
    let t = T0;
    const agents = cluster(150, () => t, { fair });
    const hub = node('hub#1', () => t, { fair });
    hub.ledger.markSynced();
    const listener = node('listener#1', () => t, { fair });
    listener.ledger.markSynced();
    spend(listener, 'team-b', 1); // it has counters of its own, so it asks every round
    for (let round = 0; round < ROUNDS; round++) {
      t += 200;
      // A burst: every agent spends and pushes to the hub; the listener asks the hub, whose answer cannot carry it all.
      for (const a of agents) {
        spend(a, 'team-a', 10);
        hub.exchange.receive(a.exchange.ask(DATAGRAM)!, DATAGRAM);
      }
      exchange(listener, hub);
    }
    const held = listener.ledger.versions();
    return agents.map((a) => (a.ledger.versions().get(a.ledger.origin)! - (held.get(a.ledger.origin) ?? 0)) / 6);
  };
  const fair = lagRounds(true);
  const fixed = lagRounds(false);
  // An answer carries about 20 origins' news, so 150 origins take about 8 rounds to go round.
  assert.ok(Math.max(...fair) <= 12, `fair: at most ${Math.max(...fair)} rounds behind on any origin`);
  const starved = fixed.filter((lag) => lag >= ROUNDS - 5).length;
  assert.ok(starved > 75, `fixed order: ${starved} of 150 origins not updated for ${ROUNDS - 5} rounds`);
});

test('a restarted agent (a new origin) admits nothing while warming, learns its old count from a peer, and never starts from an empty window', () => {
  let t = T0;
  const limits: BudgetLimit[] = [{ window: 'hour', tokens: 10_000 }];
  const old = node('a#1', () => t);
  old.ledger.markSynced();
  const peer = node('b#1', () => t);
  peer.ledger.markSynced();
  for (let i = 0; i < 6; i++) {
    const r = old.ledger.reserve('t', 'p', 1000, limits);
    assert.ok(r.ok);
    old.ledger.settle(r.reservation, 1000);
  }
  exchange(old, peer);
  t += 5000; // a#1 is gone; a#2 starts
  const restarted = node('a#2', () => t);
  restarted.exchange.round(3);
  const early = restarted.ledger.reserve('t', 'p', 1000, limits);
  assert.ok(!early.ok && early.reason === 'warming');
  exchange(restarted, peer);
  assert.equal(restarted.ledger.synced, true);
  assert.equal(restarted.ledger.state('t', limits)[0].usedTokens, 6000, "the old incarnation's usage stays counted");
  let admitted = 0;
  for (
    let r = restarted.ledger.reserve('t', 'p', 1000, limits);
    r.ok;
    r = restarted.ledger.reserve('t', 'p', 1000, limits)
  ) {
    restarted.ledger.settle(r.reservation, 1000);
    admitted++;
    t += 1000; // past the share rule's interval: only the sum limits
  }
  assert.equal(admitted, 4, '10,000 over both incarnations');
});

test('past warm-up without a full answer (partitioned), an agent spends at most 1/agents of each limit itself', () => {
  let t = T0;
  const limits: BudgetLimit[] = [{ window: 'hour', tokens: 10_000 }];
  const alone = node('c#2', () => t);
  alone.exchange.round(4); // gossip knows 4 agents, none answers
  t += 3000;
  let admitted = 0;
  for (let r = alone.ledger.reserve('t', 'p', 1000, limits); r.ok; r = alone.ledger.reserve('t', 'p', 1000, limits)) {
    alone.ledger.settle(r.reservation, 1000);
    admitted++;
    t += 1000;
  }
  assert.equal(admitted, 2, 'at most 10,000 / 4 by its own count');
  const refusal = alone.ledger.reserve('t', 'p', 1000, limits);
  assert.ok(!refusal.ok && refusal.reason === 'share' && /1\/4/.test(refusal.message));
  // Alone in the cluster (gossip knows no one else), the whole budget is its own.
  const lone = node('d#1', () => t);
  lone.exchange.round(1);
  t += 3000;
  assert.ok(lone.ledger.reserve('t', 'p', 9000, limits).ok);
});

test('a reservation still running keeps counting while gossip says its agent is alive, and stops a TTL after the agent is gone', () => {
  let t = T0;
  const limits: BudgetLimit[] = [{ window: 'hour', tokens: 10_000 }];
  const long = node('node-a#1768471200000', () => t, { pendingTtlMs: 60_000 });
  long.ledger.markSynced();
  const r = long.ledger.reserve('t', 'p', 4000, limits); // a long stream, still running
  assert.ok(r.ok);
  const peer = node('node-b#1768471200000', () => t, { pendingTtlMs: 60_000 });
  peer.ledger.markSynced();
  exchange(long, peer);
  let aAlive = true;
  const alive = (n: string, incarnation: number) => aAlive && n === 'node-a' && incarnation === 1768471200000;
  for (let s = 0; s < 90; s++) {
    t += 1000;
    peer.exchange.round(2, alive);
  }
  assert.equal(
    peer.ledger.state('t', limits)[0].usedTokens,
    4000,
    'alive per gossip: its pending still counts after 90 s',
  );
  aAlive = false;
  for (let s = 0; s < 61; s++) {
    t += 1000;
    peer.exchange.round(2, alive);
  }
  assert.equal(peer.ledger.state('t', limits)[0].usedTokens, 0, 'gone: its unsettled estimate stops counting');
});

test("the slow start doubles a new spender's share only after an interval in which it heard the whole cluster in full", () => {
  let t = T0;
  let sweeps = 0;
  const limits: BudgetLimit[] = [{ window: 'hour', tokens: 1_000_000 }];
  const spender = (paced: boolean) => {
    const l = new BudgetLedger({
      origin: `a#${paced}`,
      now: () => t,
      convergenceMs: 1000,
      warmupMs: 0,
      pendingTtlMs: 60_000,
      maxCounters: 1000,
      maxOrigins: 100,
      agents: () => 100,
      rand: () => 0.999, // no draw is won: only whole shares admit
      ...(paced ? { sweeps: () => sweeps } : {}),
    });
    l.markSynced();
    return l;
  };
  /** Requests of 1,000 tokens admitted over the next second, one asked every 10 ms. */
  const second = (l: BudgetLedger) => {
    let admitted = 0;
    for (let i = 0; i < 100; i++, t += 10) if (l.reserve('t', 'p', 1000, limits).ok) admitted++;
    return admitted;
  };
  const start = t;
  const paced = spender(true);
  const [first, blind] = [second(paced), second(paced)];
  sweeps++; // the cluster heard in full
  const heard = second(paced);
  t = start;
  const timed = spender(false);
  const [timedFirst, timedSecond] = [second(timed), second(timed)];
  assert.equal(first, 10, 'the first interval: 1/100 of what remains');
  assert.ok(blind <= first, `no sweep, no doubling (${blind} after ${first})`);
  assert.ok(heard > 1.5 * blind, `after a sweep it doubles (${heard} after ${blind})`);
  assert.ok(
    timedSecond > 1.5 * timedFirst,
    `without gossip it doubles per interval (${timedSecond} after ${timedFirst})`,
  );
});
