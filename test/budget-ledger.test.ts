import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BudgetLedger, type Admission, type LedgerOptions } from '../agent/budget/ledger.ts';
import type { BudgetLimit } from '../agent/budget/limits.ts';

// 10:00:30 UTC on some day: half a minute into the minute window.
const T0 = Date.UTC(2026, 0, 15, 10, 0, 30);

function clock(start = T0) {
  let t = start;
  return {
    now: () => t,
    advance: (ms: number) => {
      t += ms;
    },
  };
}

function ledger(origin: string, now: () => number, options: Partial<LedgerOptions> = {}): BudgetLedger {
  const l = new BudgetLedger({
    origin,
    now,
    convergenceMs: 2000,
    warmupMs: 3000,
    pendingTtlMs: 60_000,
    maxCounters: 10_000,
    maxOrigins: 100,
    ...options,
  });
  l.markSynced();
  return l;
}

/** One anti-entropy exchange both ways, as gossip would do it: each sends what the other's digest lacks. */
function sync(a: BudgetLedger, b: BudgetLedger): void {
  for (const [from, to] of [
    [a, b],
    [b, a],
  ] as const) {
    const known = to.versions();
    for (const [origin, version] of from.versions()) {
      const held = known.get(origin) ?? 0;
      if (held < version) to.merge(origin, held, version, from.deltaSince(origin, held));
    }
  }
}

function syncAll(ledgers: BudgetLedger[]): void {
  for (const a of ledgers) for (const b of ledgers) if (a !== b) sync(a, b);
}

function admitted(a: Admission): Extract<Admission, { ok: true }> {
  assert.ok(a.ok, a.ok ? '' : a.message);
  return a;
}

const MINUTE_10K: BudgetLimit[] = [{ window: 'minute', tokens: 10_000 }];

test('reserve counts the estimate at once; settle replaces it with the usage; release gives it back', () => {
  const c = clock();
  const l = ledger('a/1', c.now);
  const r = admitted(l.reserve('team-b', 'bedrock', 3000, MINUTE_10K)).reservation;
  assert.equal(l.state('team-b', MINUTE_10K)[0].usedTokens, 3000);
  l.settle(r, 1234);
  l.settle(r, 99_999); // idempotent
  assert.deepEqual(l.spent('team-b', 'minute'), { tokens: 1234, requests: 1 });
  const r2 = admitted(l.reserve('team-b', 'bedrock', 5000, MINUTE_10K)).reservation;
  l.release(r2);
  assert.equal(l.state('team-b', MINUTE_10K)[0].usedTokens, 1234);
  assert.equal(l.state('team-b', MINUTE_10K)[0].usedRequests, 1);
});

test('a tenant without budget left is refused until its window refills, Retry-After saying when', () => {
  const c = clock();
  const l = ledger('a/1', c.now);
  const limits: BudgetLimit[] = [
    { window: 'minute', requests: 2 },
    { window: 'hour', tokens: 50_000 },
  ];
  l.settle(admitted(l.reserve('t', 'p', 100, limits)).reservation, 100);
  l.settle(admitted(l.reserve('t', 'p', 100, limits)).reservation, 100);
  const refused = l.reserve('t', 'p', 100, limits);
  assert.equal(refused.ok, false);
  assert.ok(!refused.ok);
  assert.equal(refused.reason, 'exhausted');
  assert.equal(refused.scope, 'minute');
  assert.equal(refused.retryAfterMs, 30_000); // 10:00:30 → 10:01:00
  // Another tenant is not affected.
  assert.ok(l.reserve('u', 'p', 100, limits).ok);
  c.advance(30_000);
  assert.ok(l.reserve('t', 'p', 100, limits).ok, 'a new minute refills the minute limit');
  assert.equal(l.state('t', limits)[1].usedTokens, 300, 'the hour keeps counting across minutes');
});

test('a limit for one provider counts only that provider; one without counts all', () => {
  const c = clock();
  const l = ledger('a/1', c.now);
  const limits: BudgetLimit[] = [
    { window: 'hour', provider: 'bedrock', tokens: 1000 },
    { window: 'hour', tokens: 1500 },
  ];
  l.settle(admitted(l.reserve('t', 'bedrock', 900, limits)).reservation, 900);
  const bedrock = l.reserve('t', 'bedrock', 200, limits);
  assert.ok(!bedrock.ok && bedrock.scope === 'hour/bedrock');
  l.settle(admitted(l.reserve('t', 'databricks', 500, limits)).reservation, 500);
  const any = l.reserve('t', 'databricks', 200, limits);
  assert.ok(!any.ok && any.scope === 'hour');
});

test('three agents: the sum over origins is exact once synced, whatever the order or repetition of messages', () => {
  const c = clock();
  const agents = ['a/1', 'b/1', 'c/1'].map((o) => ledger(o, c.now));
  const limits: BudgetLimit[] = [{ window: 'day', tokens: 1_000_000 }];
  agents.forEach((l, i) => {
    for (let n = 0; n < 5; n++) l.settle(admitted(l.reserve('t', 'p', 1000, limits)).reservation, 100 * (i + 1));
  });
  syncAll(agents);
  syncAll(agents); // repeated: merging the same versions again changes nothing
  // And an old delta arriving late does not roll a counter back.
  agents[1].merge(
    'a/1',
    0,
    1,
    agents[0].deltaSince('a/1', 0).map((ctr) => ({ ...ctr, tokens: 0, version: 1 })),
  );
  // A delta that would leave a gap is refused.
  assert.equal(agents[1].merge('c/1', 99, 100, []), false);
  for (const l of agents) assert.deepEqual(l.spent('t', 'day'), { tokens: 5 * 100 + 5 * 200 + 5 * 300, requests: 15 });
});

test('a restarted agent is a new origin: it learns its old counts from peers and neither resets nor double-counts them', () => {
  const c = clock();
  const limits: BudgetLimit[] = [{ window: 'hour', tokens: 10_000 }];
  const a1 = ledger('a/1', c.now);
  const b = ledger('b/1', c.now);
  for (let n = 0; n < 6; n++) a1.settle(admitted(a1.reserve('t', 'p', 1000, limits)).reservation, 1000);
  sync(a1, b);
  // a/1 dies. Its successor (seconds later) starts from nothing and may not spend until it has heard the cluster.
  c.advance(8001);
  const a2 = new BudgetLedger({
    origin: 'a/2',
    now: c.now,
    convergenceMs: 2000,
    warmupMs: 3000,
    pendingTtlMs: 60_000,
    maxCounters: 1000,
    maxOrigins: 100,
  });
  const early = a2.reserve('t', 'p', 1000, limits);
  assert.ok(!early.ok && early.reason === 'warming' && early.retryAfterMs === 3000);
  sync(a2, b);
  a2.markSynced();
  assert.equal(a2.state('t', limits)[0].usedTokens, 6000, 'the old incarnation counts, on the new agent too');
  for (let n = 0; n < 4; n++) a2.settle(admitted(a2.reserve('t', 'p', 1000, limits)).reservation, 1000);
  assert.equal(a2.reserve('t', 'p', 1000, limits).ok, false, '10,000 spent over both incarnations');
  sync(a2, b);
  assert.deepEqual(b.spent('t', 'hour'), { tokens: 10_000, requests: 10 });
});

test('a partition: each side counts its own; after healing the sum is exact and the overshoot is what the far side spent', () => {
  const c = clock();
  const limits: BudgetLimit[] = [{ window: 'hour', tokens: 10_000 }];
  const [a, b, cc] = ['a/1', 'b/1', 'c/1'].map((o) => ledger(o, c.now));
  a.settle(admitted(a.reserve('t', 'p', 2000, limits)).reservation, 2000);
  syncAll([a, b, cc]);
  c.advance(8001); // a is no longer a current spender: each side spends alone
  // Partition {a} | {b, c}: each side spends what it thinks remains (8,000).
  let aSpent = 0;
  while (a.reserve('t', 'p', 1000, limits).ok) aSpent += 1000;
  let bcSpent = 0;
  for (;;) {
    const r = b.reserve('t', 'p', 1000, limits);
    if (!r.ok) break;
    bcSpent += 1000;
    sync(b, cc);
  }
  assert.equal(aSpent, 8000);
  assert.equal(bcSpent, 8000);
  syncAll([a, b, cc]);
  for (const l of [a, b, cc]) {
    assert.equal(l.state('t', limits)[0].usedTokens, 18_000, 'no token lost or counted twice');
    assert.equal(l.reserve('t', 'p', 1, limits).ok, false);
  }
});

test('window roll-over: counters of an ended window are pruned, and a request settled after it ended does not count in the new one', () => {
  const c = clock();
  // Only windows some limit uses are counted: the hour limit makes the hour counted too.
  const limits: BudgetLimit[] = [
    { window: 'minute', tokens: 1000 },
    { window: 'hour', tokens: 1_000_000 },
  ];
  const a = ledger('a/1', c.now);
  const b = ledger('b/1', c.now);
  const late = admitted(a.reserve('t', 'p', 600, limits)).reservation;
  sync(a, b);
  assert.equal(b.state('t', limits)[0].usedTokens, 600);
  c.advance(30_000); // 10:01:00
  a.settle(late, 900);
  assert.equal(a.state('t', limits)[0].usedTokens, 0);
  assert.equal(a.spent('t', 'hour').tokens, 900, 'the hour still sees it');
  const before = a.size.counters;
  a.prune();
  assert.equal(a.size.counters, before - 1, 'the ended minute counter is gone');
  // A peer still sending the ended minute is ignored.
  sync(a, b);
  b.prune();
  assert.equal(b.state('t', limits)[0].usedTokens, 0);
});

test('the share rule: spenders that know each other together admit no more than what remained', () => {
  const c = clock();
  const limits: BudgetLimit[] = [{ window: 'hour', tokens: 30_000 }];
  const agents = ['a/1', 'b/1', 'c/1'].map((o) => ledger(o, c.now));
  // Everyone spends a little and learns that the others are spending.
  for (const l of agents) l.settle(admitted(l.reserve('t', 'p', 1000, limits)).reservation, 1000);
  syncAll(agents);
  c.advance(2001);
  // Then, within one convergence interval and without hearing each other, each admits what it can.
  for (const l of agents) l.heard('x'); // no news
  let admittedTokens = 0;
  for (const l of agents) {
    for (;;) {
      const r = l.reserve('t', 'p', 1000, limits);
      if (!r.ok) {
        assert.equal(r.reason, 'share');
        assert.equal(r.retryAfterMs, 2000);
        break;
      }
      admittedTokens += 1000;
    }
  }
  // 27,000 remained; each of the 3 known spenders takes at most a third before hearing the others.
  assert.equal(admittedTokens, 27_000);
  syncAll(agents);
  for (const l of agents) assert.equal(l.state('t', limits)[0].usedTokens, 30_000);
});

test('overshoot bound: spenders unknown to each other admit at most what each sees remaining in one convergence interval', () => {
  const c = clock();
  const limits: BudgetLimit[] = [{ window: 'hour', tokens: 10_000 }];
  const agents = ['a/1', 'b/1', 'c/1'].map((o) => ledger(o, c.now));
  agents[0].settle(admitted(agents[0].reserve('t', 'p', 4000, limits)).reservation, 4000);
  syncAll(agents);
  c.advance(8001); // a's change is no longer recent (4 intervals): nobody counts it as a current spender
  // All three start spending at once, each blind to the others for one interval.
  let total = 4000;
  for (const l of agents) while (l.reserve('t', 'p', 500, limits).ok) total += 500;
  const remainingBefore = 6000;
  const documentedBound = (agents.length - 1) * remainingBefore; // (N - 1) × remaining, at worst
  assert.ok(total > 10_000, 'the blind interval does overshoot: the test would notice a bound that never bites');
  assert.ok(total - 10_000 <= documentedBound, `overshoot ${total - 10_000} ≤ ${documentedBound}`);
  // One exchange later everyone refuses.
  syncAll(agents);
  for (const l of agents) assert.equal(l.reserve('t', 'p', 1, limits).ok, false);
});

test("a silent origin's pending reservations stop counting after the TTL; its settled tokens stay until the window ends", () => {
  const c = clock();
  const limits: BudgetLimit[] = [{ window: 'hour', tokens: 10_000 }];
  const a = ledger('a/1', c.now);
  const b = ledger('b/1', c.now, { pendingTtlMs: 10_000 });
  a.settle(admitted(a.reserve('t', 'p', 3000, limits)).reservation, 3000);
  a.reserve('t', 'p', 5000, limits); // in flight when a dies
  sync(a, b);
  assert.equal(b.state('t', limits)[0].usedTokens, 8000);
  c.advance(10_001);
  b.prune();
  assert.equal(b.state('t', limits)[0].usedTokens, 3000);
});

test('bounded and defensive: malformed counters, our own origin, and origins past the bound are dropped', () => {
  const c = clock();
  const l = ledger('a/1', c.now, { maxOrigins: 2, maxCounters: 4 });
  const good = {
    tenant: 't',
    window: 'hour' as const,
    epoch: Math.floor(T0 / 3_600_000),
    provider: 'p',
    tokens: 5,
    requests: 1,
    pendingTokens: 0,
    pendingRequests: 0,
    version: 1,
    changedAt: T0,
  };
  l.merge('b/1', 0, 1, [
    { ...good, tokens: -1 },
    { ...good, tokens: 1.5 },
    { ...good, window: 'week' as 'hour' },
    { ...good, epoch: good.epoch + 5 },
    good,
  ]);
  assert.equal(l.dropped, 4);
  l.merge('a/1', 0, 99, [{ ...good, tokens: 1e6, version: 99 }]);
  l.merge('c/1', 0, 1, [good]);
  assert.equal(l.size.origins, 2);
  assert.equal(l.spent('t', 'hour').tokens, 5);
});

test('slow start: agents that all start spending at once, blind to each other, together admit no more than what remained', () => {
  const c = clock();
  const limits: BudgetLimit[] = [{ window: 'hour', tokens: 100_000 }];
  const n = 20;
  const agents = Array.from({ length: n }, (_, i) => ledger(`n${i}/1`, c.now, { agents: () => n }));
  let total = 0;
  for (const l of agents) while (l.reserve('t', 'p', 1000, limits).ok) total += 1000;
  assert.equal(total, n * 5000, 'each took 1/20 of 100,000 in the first interval');
  // Without slow start every one of them would have taken it all.
  const blind = Array.from({ length: n }, (_, i) => ledger(`m${i}/1`, c.now));
  let blindTotal = 0;
  for (const l of blind) while (l.reserve('t', 'p', 1000, limits).ok) blindTotal += 1000;
  assert.equal(blindTotal, n * 100_000);
});

test('slow start: a lone spender doubles its share every convergence interval until it has the whole budget', () => {
  const c = clock();
  const limits: BudgetLimit[] = [{ window: 'day', tokens: 1_000_000 }];
  const l = ledger('a/1', c.now, { agents: () => 8 });
  const perInterval: number[] = [];
  for (let interval = 0; interval < 5; interval++) {
    let admitted = 0;
    while (l.reserve('t', 'p', 1000, limits).ok) admitted += 1000;
    perInterval.push(admitted);
    c.advance(2001);
  }
  // 1/8, 2/8, 4/8 of what remained, then all of it.
  assert.deepEqual(perInterval, [125_000, 218_000, 328_000, 329_000, 0]);
});

test('the share interval lasts as long as news takes to arrive: late news keeps a spent share spent past the convergence interval', () => {
  const c = clock();
  const limits: BudgetLimit[] = [{ window: 'hour', tokens: 100_000 }];
  const [a, b] = ['a/1', 'b/1'].map((o) => ledger(o, c.now));
  for (const l of [a, b]) l.settle(admitted(l.reserve('t', 'p', 1000, limits)).reservation, 1000);
  syncAll([a, b]);
  c.advance(2001);
  // b spends; a hears of it only 5 s later (gossip slower than the 2 s it was configured with).
  b.settle(admitted(b.reserve('t', 'p', 1000, limits)).reservation, 1000);
  c.advance(5000);
  sync(a, b);
  let first = 0;
  while (a.reserve('t', 'p', 1000, limits).ok) first++;
  assert.ok(first > 0);
  // One configured interval later the share is still spent: the others' news of it is not here yet.
  c.advance(2001);
  const early = a.reserve('t', 'p', 1000, limits);
  assert.ok(!early.ok && early.reason === 'share');
  // Once as long as the news took has passed, a takes its share of what remains again.
  c.advance(3000);
  assert.ok(a.reserve('t', 'p', 1000, limits).ok);
});
