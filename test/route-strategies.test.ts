import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Candidate } from '../agent/route/candidate.ts';
import { decide, KINFERENCE_STRATEGY } from '../agent/route/router.ts';
import { randomAmongLowest, STRATEGIES } from '../agent/route/strategies.ts';
import { routeCandidate, routePolicy, routeRequest, STAY } from './helpers/route-fixtures.ts';

const POLICY = routePolicy();
const REQUEST = routeRequest();

function pod(name: string, overrides: Partial<Candidate> = {}): Candidate {
  return routeCandidate(name, {
    ageMs: 10,
    maxAgeMs: 200,
    kvCache: 0.1,
    params: { base: 20, perQueued: 100, perRunning: 2, perKPromptTokens: 200 },
    ...overrides,
  });
}

function chosen(strategy: ReturnType<(typeof STRATEGIES)[string]>, candidates: Candidate[], rand = () => 0): string {
  const d = decide({ request: REQUEST, policy: POLICY, candidates, leave: STAY, rand, strategy });
  assert.equal(d.action, 'pod');
  return d.action === 'pod' ? d.chosen.candidate.pod.name : '';
}

test('strategies are selectable by name, and kinference is the router default', () => {
  assert.deepEqual(Object.keys(STRATEGIES).sort(), ['kinference', 'least-request', 'round-robin']);
  assert.equal(STRATEGIES.kinference(), KINFERENCE_STRATEGY);
});

test('least-request sends to the pod with the fewest requests in flight, whatever its queue', () => {
  const candidates = [
    pod('busy', { inFlight: 3 }),
    pod('queued', { inFlight: 1, queuedNow: 9 }),
    pod('idle', { inFlight: 2 }),
  ];
  assert.equal(chosen(STRATEGIES['least-request'](), candidates), 'queued');
});

test('round-robin takes each candidate in turn, and its cursor is per strategy instance', () => {
  const candidates = [pod('a'), pod('b'), pod('c')];
  const rr = STRATEGIES['round-robin']();
  assert.deepEqual(
    [1, 2, 3, 4].map(() => chosen(rr, candidates)),
    ['a', 'b', 'c', 'a'],
  );
  assert.equal(chosen(STRATEGIES['round-robin'](), candidates), 'a');
});

test('baseline decisions are explained like Kinference’s: every candidate scored with its prediction', () => {
  const d = decide({
    request: REQUEST,
    policy: POLICY,
    candidates: [pod('a', { inFlight: 1 }), pod('b')],
    leave: STAY,
    rand: () => 0,
    strategy: STRATEGIES['least-request'](),
  });
  assert.deepEqual(
    d.scored.map((s) => [s.candidate.pod.name, s.score]),
    [
      ['b', 0],
      ['a', 1],
    ],
  );
  assert.ok(d.scored.every((s) => s.predictedMs > 0));
});

test('randomAmongLowest draws among ties only, and nothing from nothing', () => {
  const scored = [1, 0, 0, 2].map((score, i) => ({ candidate: pod(`p${i}`), predictedMs: 1, quantileMs: 1, score }));
  assert.equal(randomAmongLowest(scored, () => 0)?.candidate.pod.name, 'p1');
  assert.equal(randomAmongLowest(scored, () => 0.99)?.candidate.pod.name, 'p2');
  assert.equal(
    randomAmongLowest([], () => 0),
    undefined,
  );
});
