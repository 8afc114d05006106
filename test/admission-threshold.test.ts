// The admission loop on measured attainment (agent/admission/threshold.ts) and the warm start of a
// restarted agent (agent/pool, agent/predict): pure, with time passed in.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AdmissionThreshold, AdmissionThresholds } from '../agent/admission/threshold.ts';
import { PodPool } from '../agent/pool/pool.ts';
import { mulberry32 } from '../shared/sim/random.ts';
import type { PodEstimate } from '../agent/types.ts';
import { poolOptions, routePod } from './helpers/route-fixtures.ts';

/** Feeds `n` outcomes, each a miss with probability `missRate`, one every `everyMs`. */
function feed(loop: AdmissionThreshold, from: number, n: number, missRate: number, rand: () => number, everyMs = 100) {
  let t = from;
  for (let i = 0; i < n; i++, t += everyMs) loop.observe(t, rand() >= missRate);
  return t;
}

test('with the error budget unspent the loop loosens the admission quantile, slowly and within its bound', () => {
  const loop = new AdmissionThreshold(0.99);
  assert.equal(loop.quantile, 0.99);
  let t = feed(loop, 0, 50, 0, mulberry32(1));
  const after50 = loop.quantile;
  assert.ok(after50 < 0.99 && after50 > 0.97, `50 successes loosen a little: ${after50}`);
  assert.ok(new AdmissionThreshold(0.6, {}, 0.1).quantile === 0.5, 'and never below p50, whatever the target');
  t = feed(loop, t, 20_000, 0, mulberry32(2));
  assert.ok(
    Math.abs(loop.quantile - 0.98) < 1e-9,
    `never below the loosest bound, p98 at a 99% target: ${loop.quantile}`,
  );
  assert.match(loop.state(t).why, /loosest bound/);
});

test('misses tighten fast: a burst brings the quantile to its strictest bound, never past it', () => {
  const loop = new AdmissionThreshold(0.99);
  let t = feed(loop, 0, 2000, 0, mulberry32(3));
  const loose = loop.quantile;
  t = feed(loop, t, 5, 1, mulberry32(4));
  assert.ok(1 - loop.quantile < (1 - loose) * 0.35, `5 misses cut the miss chance allowed by 2/3: ${loop.quantile}`);
  t = feed(loop, t, 100, 1, mulberry32(5));
  assert.ok(Math.abs(loop.quantile - 0.999) < 1e-9, `strictest bound: ${loop.quantile}`);
  assert.match(loop.state(t).why, /strictest bound/);
  assert.ok(loop.state(t).budgetLeft < 0, 'the window overspent its budget');
});

test('at a steady miss rate the loop settles where misses equal its aim, without swinging bound to bound', () => {
  // A pool where the chance of a miss grows as the quantile loosens: miss = 2·(1 - q).
  const loop = new AdmissionThreshold(0.99);
  const rand = mulberry32(6);
  let t = 0;
  let misses = 0;
  let lowest = 1;
  let atBound = 0;
  for (let i = 0; i < 60_000; i++, t += 20) {
    const miss = rand() < 2 * (1 - loop.quantile);
    if (miss) misses++;
    loop.observe(t, !miss);
    if (i > 10_000) {
      lowest = Math.min(lowest, loop.quantile);
      if (loop.quantile > 0.999 - 1e-9 || loop.quantile <= 0.98 + 1e-9) atBound++;
    }
  }
  const missShare = misses / 60_000;
  assert.ok(Math.abs(missShare - loop.aimMiss) < loop.aimMiss * 0.25, `misses ${missShare} vs aim ${loop.aimMiss}`);
  assert.ok(lowest > 0.98, `never near "all local": ${lowest}`);
  assert.ok(atBound < 50_000 * 0.02, `rarely at a bound: ${atBound}`);
});

test('attainment is measured over a sliding window: old outcomes leave it', () => {
  const loop = new AdmissionThreshold(0.99, { windowMs: 10_000, bucketMs: 1000 });
  feed(loop, 0, 10, 1, mulberry32(7), 100);
  assert.equal(loop.state(1000).measured, 10);
  assert.equal(loop.state(1000).within, 0);
  assert.equal(loop.state(20_000).measured, 0);
  assert.match(loop.state(20_000).why, /holding/);
});

test('one loop per policy, a changed target starts afresh, and the number of loops is bounded', () => {
  const loops = new AdmissionThresholds({}, 2);
  loops.observe('a', 0.99, 0, false);
  assert.ok(loops.quantile('a', 0.99) > 0.99);
  assert.equal(loops.quantile('b', 0.95), 0.95);
  assert.equal(loops.quantile('a', 0.9), 0.9, 'a new target, a new loop');
  loops.quantile('c', 0.99);
  assert.equal(loops.states(0).length, 2);
});

test('a restarted agent predicts its pods from what peers gossip back, not from the prior', () => {
  const fresh = new PodPool(poolOptions(() => 0, { node: 'n' }));
  const pods = [routePod('a', { node: 'n', engine: 'vllm' }), routePod('b', { node: 'n', engine: 'vllm' })];
  fresh.setLocalPods(pods);
  const prior = fresh.candidates().find((c) => c.pod.name === 'b')!.params;
  const learned = { base: 40, perQueued: 90, perRunning: 3, perKPromptTokens: 120, perKPendingTokens: 120 };
  const gossip = (pod: (typeof pods)[number], scale: number): PodEstimate => ({
    pod,
    queued: 0,
    queuedNow: 0,
    running: 0,
    kvCache: 0,
    params: {
      base: learned.base * scale,
      perQueued: learned.perQueued * scale,
      perRunning: learned.perRunning * scale,
      perKPromptTokens: learned.perKPromptTokens * scale,
      perKPendingTokens: learned.perKPendingTokens * scale,
    },
    at: 0,
    origin: 'n',
    version: 1,
  });
  fresh.setRemote([gossip(pods[0], 1), gossip(pods[1], 2)]);
  const a = fresh.candidates().find((c) => c.pod.name === 'a')!.params;
  const b = fresh.candidates().find((c) => c.pod.name === 'b')!.params;
  assert.notDeepEqual(b, prior);
  assert.ok(Math.abs(a.perQueued - 90) < 1e-6, `${a.perQueued}`);
  assert.ok(Math.abs(b.perQueued / a.perQueued - 2) < 1e-6, 'the slower pod stays twice as slow');
  assert.equal(fresh.candidates().length, 2, 'its own pods are not also peers');
});

test('a request whose SLO passes without a first token counts as a miss then, once, not when its token comes', () => {
  const loop = new AdmissionThreshold(0.99);
  const before = loop.quantile;
  const late = loop.admitted(0, 800);
  const failed = loop.admitted(10, 800);
  const onTime = loop.admitted(20, 800);
  onTime(300, true);
  failed(400); // failed before its first byte: no outcome
  loop.expire(700);
  assert.equal(loop.state(700).measured, 1, 'nothing has passed its deadline yet');
  loop.expire(900);
  assert.equal(loop.state(900).measured, 2);
  assert.equal(loop.state(900).within, 1);
  assert.ok(loop.quantile > before, 'the miss tightened at its deadline');
  late(5000, false);
  late(5000, true);
  assert.equal(loop.state(5000).measured, 2, 'the late token is not counted again');
});
