import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Candidate } from '../agent/route/candidate.ts';
import { decide, type LeaveVerdict } from '../agent/route/router.ts';
import { fastestAmongNearTies, type Scored } from '../agent/route/picker.ts';
import { routeCandidate, routePolicy, routeRequest, STAY } from './helpers/route-fixtures.ts';

const POLICY = routePolicy({
  name: 'builtin/default',
  exclude: [{ metric: 'queued', above: 2, windowMs: 30_000 }],
  waitMaxMs: 2000,
});
const REQUEST = routeRequest();
const LEAVE: LeaveVerdict = { allowed: true, reason: 'allowed', providers: ['p1', 'p2'] };

function pod(name: string, overrides: Partial<Candidate> & { avgQueued?: number } = {}): Candidate {
  const { avgQueued, ...rest } = overrides;
  return routeCandidate(name, {
    ageMs: 10,
    maxAgeMs: 200,
    kvCache: 0.1,
    average: (metric) => (metric === 'queued' ? (avgQueued ?? 0) : 0),
    params: { base: 20, perQueued: 100, perRunning: 2, perKPromptTokens: 200 },
    ...rest,
  });
}

const first = () => 0;

test('sends the request to the pod with the lowest predicted TTFT', () => {
  const d = decide({
    request: REQUEST,
    policy: POLICY,
    leave: STAY,
    rand: first,
    candidates: [pod('busy', { queuedNow: 2 }), pod('idle'), pod('mid', { queuedNow: 1 })],
  });
  assert.equal(d.action, 'pod');
  assert.equal(d.action === 'pod' && d.chosen.candidate.pod.name, 'idle');
  assert.deepEqual(
    d.scored.map((s) => s.candidate.pod.name),
    ['idle', 'mid', 'busy'],
  );
});

test('a pod half as fast loses to a faster pod with the same load', () => {
  const slow = pod('slow', { running: 4, params: { base: 40, perQueued: 200, perRunning: 4, perKPromptTokens: 400 } });
  const d = decide({
    request: REQUEST,
    policy: POLICY,
    leave: STAY,
    rand: first,
    candidates: [slow, pod('fast', { running: 4 })],
  });
  assert.equal(d.action === 'pod' && d.chosen.candidate.pod.name, 'fast');
});

test('drops stale, unhealthy, excluded and over-SLO pods, each with its reason', () => {
  const d = decide({
    request: REQUEST,
    policy: POLICY,
    leave: STAY,
    rand: first,
    candidates: [
      pod('stale', { ageMs: 500 }),
      pod('sick', { healthy: false }),
      pod('queued', { avgQueued: 2.5 }),
      pod('slow', { queuedNow: 10 }),
      pod('other-model', { pod: { uid: 'x', name: 'other', namespace: 'ns', node: 'n', address: 'a', models: ['z'] } }),
      pod('ok'),
    ],
  });
  assert.equal(d.action === 'pod' && d.chosen.candidate.pod.name, 'ok');
  assert.deepEqual(
    d.dropped.map((x) => [x.pod, x.reason]),
    [
      ['local/stale', 'stale'],
      ['local/sick', 'unhealthy'],
      ['local/queued', 'excluded'],
      ['local/slow', 'over-slo'],
    ],
  );
  assert.match(d.dropped[2].detail, /queued 2.5 > 2 \(avg over 30s\)/);
});

test('a pod already holding requests costs more than its prediction alone, in proportion to its speed', () => {
  // Same prediction for this request, but "busy" holds 6 running requests: the load term prices them.
  const busy = pod('busy', { running: 6, params: { base: 8, perQueued: 100, perRunning: 2, perKPromptTokens: 200 } });
  const d = decide({ request: REQUEST, policy: POLICY, leave: STAY, rand: first, candidates: [busy, pod('idle')] });
  assert.equal(d.action === 'pod' && d.chosen.candidate.pod.name, 'idle');
  assert.equal(Math.round(d.scored[1].predictedMs), Math.round(d.scored[0].predictedMs));
});

test('counts requests sent since the last scrape as queue, so a burst spreads', () => {
  const d = decide({
    request: REQUEST,
    policy: POLICY,
    leave: STAY,
    rand: first,
    candidates: [pod('a', { unseenSent: 2 }), pod('b')],
  });
  assert.equal(d.action === 'pod' && d.chosen.candidate.pod.name, 'b');
});

test('randomises among near-ties but never beyond them', () => {
  const candidates = [
    pod('a'),
    pod('b', { params: { base: 22, perQueued: 100, perRunning: 2, perKPromptTokens: 200 } }),
    pod('far', { queuedNow: 1 }),
  ];
  const chosen = new Set<string>();
  for (const r of [0, 0.3, 0.6, 0.99]) {
    const d = decide({ request: REQUEST, policy: POLICY, leave: STAY, rand: () => r, candidates });
    if (d.action === 'pod') chosen.add(d.chosen.candidate.pod.name);
  }
  assert.deepEqual([...chosen].sort(), ['a', 'b']);
});

test('with equal predictions a local pod wins over a peer pod', () => {
  const peer = pod('remote', {
    where: 'peer',
    networkCostMs: 0,
    pod: { uid: 'r', name: 'remote', namespace: 'ns', node: 'node-b', address: 'x', models: ['m'] },
  });
  for (const r of [0, 0.5, 0.99]) {
    const d = decide({ request: REQUEST, policy: POLICY, leave: STAY, rand: () => r, candidates: [peer, pod('here')] });
    assert.equal(d.action === 'pod' && d.chosen.candidate.pod.name, 'here');
  }
});

test('a peer pod wins when the local pods are excluded', () => {
  const peer = pod('remote', {
    where: 'peer',
    networkCostMs: 1,
    pod: { uid: 'r', name: 'remote', namespace: 'ns', node: 'node-b', address: 'x', models: ['m'] },
  });
  const d = decide({
    request: REQUEST,
    policy: POLICY,
    leave: STAY,
    rand: first,
    candidates: [pod('here', { avgQueued: 5 }), peer],
  });
  assert.equal(d.action === 'pod' && d.chosen.candidate.pod.node, 'node-b');
});

test('overflows only when no pod qualifies and the request may leave', () => {
  const busy = [pod('a', { avgQueued: 3 }), pod('b', { queuedNow: 9 })];
  const out = decide({ request: REQUEST, policy: POLICY, leave: LEAVE, rand: first, candidates: busy });
  assert.equal(out.action, 'overflow');
  assert.deepEqual(out.action === 'overflow' && out.providers, ['p1', 'p2']);
  const stays = decide({
    request: REQUEST,
    policy: POLICY,
    leave: LEAVE,
    rand: first,
    candidates: [...busy, pod('c')],
  });
  assert.equal(stays.action, 'pod');
});

test('a request that may not leave waits for the rest of wait.max, then gets 429', () => {
  const busy = [pod('a', { avgQueued: 3 })];
  const d = decide({ request: REQUEST, policy: POLICY, leave: STAY, rand: first, candidates: busy, waitedMs: 500 });
  assert.deepEqual(d.action === 'wait' && d.maxWaitMs, 1500);
  const late = decide({ request: REQUEST, policy: POLICY, leave: STAY, rand: first, candidates: busy, waitedMs: 2000 });
  assert.equal(late.action === 'reject' && late.status, 429);
});

test('503 when no pod serves the model and it may not leave', () => {
  const d = decide({ request: REQUEST, policy: POLICY, leave: STAY, rand: first, candidates: [] });
  assert.equal(d.action === 'reject' && d.status, 503);
});

test('calibrated admission: a request that may leave needs the quantile within the SLO; one that may not keeps the mean', () => {
  // Mean 260 ms (20 + 2·100 + 0.2·200) at both pods; `wide` errs up to ×2 at 99%, `tight` up to ×1.2.
  const wide = pod('wide', { queuedNow: 2, logMargin: () => Math.log(2) });
  const tight = pod('tight', { queuedNow: 2, logMargin: () => Math.log(1.2) });
  const leaving = decide({
    request: REQUEST,
    policy: { ...POLICY, exclude: [] },
    leave: LEAVE,
    rand: first,
    candidates: [wide, tight],
  });
  assert.equal(leaving.action === 'pod' && leaving.chosen.candidate.pod.name, 'tight');
  assert.deepEqual(
    leaving.dropped.map((d) => [d.pod, d.reason, d.detail]),
    [['local/wide', 'over-slo', 'p99 520ms (mean 260ms) > SLO 500ms']],
  );
  assert.equal(leaving.action === 'pod' && Math.round(leaving.chosen.quantileMs), 312);

  const onlyWide = decide({
    request: REQUEST,
    policy: { ...POLICY, exclude: [] },
    leave: LEAVE,
    rand: first,
    candidates: [wide],
  });
  assert.equal(onlyWide.action, 'overflow');

  // Same pods, request may not leave: the mean (260 ms) decides, exactly as without calibration.
  const staying = decide({
    request: REQUEST,
    policy: { ...POLICY, exclude: [] },
    leave: STAY,
    rand: first,
    candidates: [wide],
  });
  assert.equal(staying.action === 'pod' && staying.chosen.candidate.pod.name, 'wide');

  // The mean still ranks: a wider but faster pod wins among admitted ones.
  const fastWide = pod('fast-wide', { logMargin: () => Math.log(1.5) });
  const ranked = decide({
    request: REQUEST,
    policy: { ...POLICY, exclude: [] },
    leave: LEAVE,
    rand: first,
    candidates: [tight, fastWide],
  });
  assert.equal(ranked.action === 'pod' && ranked.chosen.candidate.pod.name, 'fast-wide');
});

test('a higher attainment asks for a wider margin: the same pod passes at 90% and overflows at 99.9%', () => {
  const p = pod('p', { queuedNow: 2, logMargin: (q) => (q >= 0.999 ? Math.log(2.5) : Math.log(1.1)) });
  const at = (sloAttainment: number) =>
    decide({
      request: REQUEST,
      policy: { ...POLICY, exclude: [], sloAttainment },
      leave: LEAVE,
      rand: first,
      candidates: [p],
    }).action;
  assert.equal(at(0.9), 'pod');
  assert.equal(at(0.999), 'overflow');
});

test('a pod reporting a negative, NaN or infinite load never wins: dropped as implausible (peers included)', () => {
  for (const lie of [
    { queuedNow: -1000 },
    { running: -1000 },
    { queuedNow: NaN },
    { running: Infinity },
    { inFlight: -3 },
  ]) {
    const liar = pod('liar', { where: 'peer', ...lie });
    const d = decide({
      request: REQUEST,
      policy: { ...POLICY, sloTtftMs: Infinity, exclude: [] },
      leave: STAY,
      rand: first,
      candidates: [liar, pod('honest', { queuedNow: 1 })],
    });
    assert.equal(d.action === 'pod' && d.chosen.candidate.pod.name, 'honest', JSON.stringify(lie));
    assert.deepEqual(
      d.dropped.map((x) => [x.pod, x.reason]),
      [['peer/node-a/liar', 'implausible']],
    );
    assert.ok(d.scored.every((s) => Number.isFinite(s.score) && s.score >= 0));
  }
});

test('a pod at its connection cap is not a candidate: the request goes elsewhere', () => {
  const d = decide({
    request: REQUEST,
    policy: POLICY,
    leave: STAY,
    rand: first,
    candidates: [pod('full', { inFlight: 4, maxInFlight: 4 }), pod('busier', { queuedNow: 1, maxInFlight: 4 })],
  });
  assert.equal(d.action === 'pod' && d.chosen.candidate.pod.name, 'busier');
  assert.deepEqual(
    d.dropped.map((x) => [x.pod, x.reason, x.detail]),
    [['local/full', 'at-capacity', '4 requests in flight (limit 4)']],
  );
});

test('every provider breaker open: after the wait, 503 with the cool-down as Retry-After and a true message', () => {
  const busy = [pod('a', { avgQueued: 3 })];
  const open: LeaveVerdict = {
    allowed: true,
    reason: "may overflow to p1, but every provider's circuit breaker is open",
    providers: [],
    breakersOpenMs: 7_200,
  };
  assert.equal(decide({ request: REQUEST, policy: POLICY, leave: open, rand: first, candidates: busy }).action, 'wait');
  const late = decide({ request: REQUEST, policy: POLICY, leave: open, rand: first, candidates: busy, waitedMs: 2000 });
  assert.equal(late.action, 'reject');
  assert.equal(late.action === 'reject' && late.status, 503);
  assert.equal(late.action === 'reject' && late.retryAfterMs, 7_200);
  assert.match(late.action === 'reject' ? late.message : '', /circuit breaker is open \(next trial in 8s\)/);
});

test('among near-ties the pod expected to hold more of the prompt wins; beyond them the prediction decides', () => {
  // 32 cached tokens save ~6 ms of prefill here: still a near-tie, and the holder takes it every time.
  const holder = pod('holder', { expectedCachedTokens: 32 });
  for (const r of [0, 0.5, 0.99]) {
    const d = decide({
      request: REQUEST,
      policy: POLICY,
      leave: STAY,
      rand: () => r,
      candidates: [pod('a'), holder, pod('b')],
    });
    assert.equal(d.action === 'pod' && d.chosen.candidate.pod.name, 'holder');
  }
  // A queued request ahead costs it more than the prefill it saves: an idle pod wins, no affinity weight.
  const queuedHolder = pod('holder', { expectedCachedTokens: 32, queuedNow: 1 });
  const d = decide({
    request: REQUEST,
    policy: POLICY,
    leave: STAY,
    rand: first,
    candidates: [queuedHolder, pod('idle')],
  });
  assert.equal(d.action === 'pod' && d.chosen.candidate.pod.name, 'idle');
});

// The picker and the sort were rewritten to make no list per request (bench:micro's p99 is the
// GC); these hold them to what filtering lists and Array.prototype.sort chose, over many shapes.
function seeded(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

function listPicker(options: { absoluteMs: number; fraction: number }) {
  return (scored: readonly Scored[], rand: () => number): Scored | undefined => {
    if (scored.length === 0) return undefined;
    let best = scored[0];
    for (const s of scored) if (s.score < best.score) best = s;
    const limit = best.score + Math.max(options.absoluteMs, best.score * options.fraction);
    const ties = scored.filter((s) => s.score <= limit);
    const localTies = ties.filter((s) => s.candidate.where === 'local');
    const group = localTies.length > 0 ? localTies : ties;
    let most = 0;
    for (const s of group) most = Math.max(most, s.candidate.expectedCachedTokens ?? 0);
    const pool = most === 0 ? group : group.filter((s) => (s.candidate.expectedCachedTokens ?? 0) === most);
    return pool[Math.min(pool.length - 1, Math.floor(rand() * pool.length))];
  };
}

test('the near-tie picker chooses exactly what filtering the ties into lists chose', () => {
  const options = { absoluteMs: 5, fraction: 0.05 };
  const pick = fastestAmongNearTies(options);
  const reference = listPicker(options);
  const shapes = seeded(7);
  let differentChoices = 0;
  for (let round = 0; round < 2000; round++) {
    const n = Math.floor(shapes() * 12);
    const scored: Scored[] = Array.from({ length: n }, (_, i) => ({
      candidate: pod(`p${i}`, {
        where: shapes() < 0.4 ? 'local' : 'peer',
        expectedCachedTokens: shapes() < 0.3 ? Math.floor(shapes() * 3) * 64 : 0,
      }),
      predictedMs: 0,
      quantileMs: 0,
      score: shapes() < 0.1 ? NaN : 100 + Math.floor(shapes() * 12),
    }));
    const r = shapes();
    let calls = 0;
    const chosen = pick(scored, () => (calls++, r));
    let referenceCalls = 0;
    const expected = reference(scored, () => (referenceCalls++, r));
    assert.equal(chosen, expected, `round ${round}`);
    assert.equal(calls, referenceCalls);
    if (expected !== scored[0]) differentChoices++;
  }
  assert.ok(differentChoices > 100); // the shapes did exercise ties, locals and caches
});

test('decide lists the passing pods in the order a stable sort by score gives, equal scores in candidate order', () => {
  const shapes = seeded(11);
  for (let round = 0; round < 300; round++) {
    const n = 1 + Math.floor(shapes() * 90); // both sides of the insertion sort's bound
    const candidates = Array.from({ length: n }, (_, i) =>
      pod(`p${i}`, { queuedNow: Math.floor(shapes() * 2), running: Math.floor(shapes() * 3) }),
    );
    const d = decide({ request: REQUEST, policy: POLICY, candidates, leave: STAY, rand: first });
    const expected = [...d.scored].sort((a, b) => candidates.indexOf(a.candidate) - candidates.indexOf(b.candidate));
    expected.sort((a, b) => (a.score < b.score ? -1 : a.score > b.score ? 1 : 0));
    assert.deepEqual(
      d.scored.map((s) => s.candidate.pod.name),
      expected.map((s) => s.candidate.pod.name),
    );
    assert.equal(d.scored.length + d.dropped.length, n);
  }
});

const LONG_SLO = { ...POLICY, sloTtftMs: 2000 };

test('a pod that would prefill again what another pod holds is charged for the queue that waits on it', () => {
  // 2,000 prompt tokens, 1,800 of them cached on the holder, whose queue is five deep; the other
  // pod has one request queued. Its own TTFT is lower there (520 vs 560 ms) …
  const request = routeRequest({ promptTokens: 2000 });
  const holder = pod('holder', { expectedCachedTokens: 1800, queuedNow: 5 });
  const other = pod('other', { queuedNow: 1 });
  const d = decide({ request, policy: LONG_SLO, leave: STAY, rand: first, candidates: [other, holder] });
  assert.ok(d.action === 'pod');
  const byName = Object.fromEntries(d.scored.map((s) => [s.candidate.pod.name, s]));
  assert.equal(Math.round(byName.other.predictedMs), 520);
  assert.equal(Math.round(byName.holder.predictedMs), 560);
  // … but there it would prefill 1,800 tokens (360 ms) that the holder need not, and every request
  // that joins its queue behind this one waits for them: the holder wins.
  assert.equal(d.chosen.candidate.pod.name, 'holder');
  assert.ok(byName.other.score - byName.other.predictedMs > 360);
  // The pod chosen between `rival` and the holder.
  const against = (rival: Candidate) => {
    const chosen = decide({ request, policy: LONG_SLO, leave: STAY, rand: first, candidates: [rival, holder] });
    return chosen.action === 'pod' ? chosen.chosen.candidate.pod.name : chosen.action;
  };
  // Requests sent but not yet seen in a scrape are queue too.
  assert.equal(against(pod('unseen', { unseenSent: 1 })), 'holder');
  // Requests admitted to the batch but still prefilling (this agent's, awaiting their first token)
  // wait on it too, though the pod's waiting count no longer shows them.
  assert.equal(against(pod('prefilling', { pendingRequests: 1, running: 1 })), 'holder');
  // Nothing waits there, but requests keep arriving: at 2 a second, 0.85 of one reaches the pod
  // during this one's predicted 424 ms, and waits for the 360 ms of recomputed prefix.
  assert.equal(against(pod('arriving', { running: 2, sentPerMs: 0.002 })), 'holder');
  assert.equal(against(pod('arriving', { running: 2 })), 'arriving');
  // With no queue and nothing sent there lately nobody waits on that prefill: the other pod wins by its own TTFT.
  assert.equal(against(pod('idle')), 'idle');
});

test('without a cached prefix anywhere the score is the prediction plus the load term, as before prefix caching', () => {
  const d = decide({
    request: routeRequest({ promptTokens: 2000 }),
    policy: LONG_SLO,
    leave: STAY,
    rand: first,
    candidates: [pod('a', { queuedNow: 1, running: 3 }), pod('b', { queuedNow: 2, unseenSent: 1 })],
  });
  const idleTtft = 20 + 0.2 * 256;
  for (const s of d.scored) {
    const c = s.candidate;
    assert.equal(s.score, s.predictedMs + 0.3 * idleTtft * (c.running + c.queuedNow + c.unseenSent));
  }
});

test('drop details, written when first read, say what the filters saw at the decision, and serialise as plain objects', () => {
  // Predictions: 20 + 100·queued + 40 ms (200 prompt tokens); the SLO is 500 ms.
  const rules = [
    { metric: 'queued' as const, above: 2, windowMs: 30_000 },
    { metric: 'predictedTTFT' as const, above: 600, windowMs: 0 },
  ];
  const capped = pod('capped', { inFlight: 4, maxInFlight: 4 });
  const decision = (leave: LeaveVerdict) =>
    decide({
      request: REQUEST,
      policy: { ...POLICY, exclude: rules },
      leave,
      rand: first,
      candidates: [
        pod('stale', { ageMs: 512.6 }),
        pod('sick', { healthy: false, unhealthyReason: 'metrics page refused: waiting -3' }),
        pod('liar', { where: 'peer', running: -1 }),
        pod('endless', { params: { base: Infinity, perQueued: 1, perRunning: 1, perKPromptTokens: 1 } }),
        capped,
        pod('queued', { avgQueued: 2.456 }),
        pod('slowest', { queuedNow: 6 }),
        pod('slower', { queuedNow: 5 }),
        pod('slow', { queuedNow: 4, logMargin: () => Math.log(1.5) }),
        pod('other-model', { pod: { uid: 'x', name: 'x', namespace: 'ns', node: 'n', address: 'a', models: ['z'] } }),
        pod('ok'),
      ],
    });
  const staying = decision(STAY);
  const leaving = decision(LEAVE);
  // Read after the candidates' counts moved on: the details keep what the decision saw.
  capped.inFlight = 9;
  const common = [
    ['local/stale', 'stale', 'last report 513ms ago (limit 200ms)'],
    ['local/sick', 'unhealthy', 'metrics page refused: waiting -3'],
    ['peer/node-a/liar', 'implausible', 'running -1'],
    ['local/endless', 'implausible', 'predicted TTFT Infinityms'],
    ['local/capped', 'at-capacity', '4 requests in flight (limit 4)'],
    ['local/queued', 'excluded', 'queued 2.46 > 2 (avg over 30s)'],
    ['local/slowest', 'excluded', 'predictedTTFT 660 > 600 (now)'],
  ];
  assert.deepEqual(
    staying.dropped.map((x) => [x.pod, x.reason, x.detail]),
    [...common, ['local/slower', 'over-slo', 'predicted 560ms > SLO 500ms']],
  );
  assert.deepEqual(
    leaving.dropped.map((x) => [x.pod, x.reason, x.detail]),
    [
      ...common,
      ['local/slower', 'over-slo', 'p99 560ms (mean 560ms) > SLO 500ms'],
      ['local/slow', 'over-slo', 'p99 690ms (mean 460ms) > SLO 500ms'],
    ],
  );
  // JSON (logs, explain's wire) sees the plain fields in their order, detail and name included.
  const plain = JSON.parse(JSON.stringify(leaving.dropped)) as Record<string, unknown>[];
  assert.deepEqual(
    plain.map((x) => Object.keys(x)),
    leaving.dropped.map(() => ['reason', 'detail', 'pod', 'where', 'predictedMs', 'quantileMs']),
  );
  assert.deepEqual(
    plain.map((x) => [x.pod, x.reason, x.detail, x.where]),
    leaving.dropped.map((x) => [x.pod, x.reason, x.detail, x.where]),
  );
  assert.deepEqual([plain[8].predictedMs, plain[8].quantileMs], [460, 690]);
});
