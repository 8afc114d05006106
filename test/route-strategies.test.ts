import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Candidate } from '../agent/route/candidate.ts';
import { decide, KINFERENCE_STRATEGY, type LeaveVerdict } from '../agent/route/router.ts';
import { randomAmongLowest, STRATEGIES } from '../agent/route/strategies.ts';
import type { EffectivePolicy, RouteRequest } from '../agent/types.ts';

const POLICY: EffectivePolicy = {
  name: 'test',
  sloTtftMs: 500,
  sloAttainment: 0.99,
  exclude: [],
  overflow: { providers: [], denyTags: [], denyTenants: [] },
  waitMaxMs: 0,
};
const REQUEST: RouteRequest = {
  kind: 'chat',
  model: 'm',
  tenant: 't',
  namespace: 't',
  tags: [],
  promptTokens: 200,
  stream: true,
};
const STAY: LeaveVerdict = { allowed: false, reason: 'no overflow providers in policy', providers: [] };

function pod(name: string, overrides: Partial<Candidate> = {}): Candidate {
  return {
    pod: { uid: `ns/${name}`, name, namespace: 'ns', node: 'node-a', address: '127.0.0.1:1', models: ['m'] },
    where: 'local',
    ageMs: 10,
    maxAgeMs: 200,
    healthy: true,
    queuedNow: 0,
    running: 0,
    kvCache: 0.1,
    average: () => 0,
    params: { base: 20, perQueued: 100, perRunning: 2, perKPromptTokens: 200 },
    inFlight: 0,
    unseenSent: 0,
    pendingPromptTokens: 0,
    networkCostMs: 0,
    ...overrides,
  };
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
