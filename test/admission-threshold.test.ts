// The admission loop on measured attainment (agent/admission/threshold.ts) and the warm start of a
// restarted agent (agent/pool, agent/predict): pure, with time passed in.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AdmissionThreshold, AdmissionThresholds } from '../agent/admission/threshold.ts';
import { plannedMissChance } from '../agent/admission/planned-miss.ts';
import { LeavableAhead } from '../agent/admission/leavable-ahead.ts';
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

/** The law alone: outcomes fed directly, no hold before the first SLO has passed. */
const LAW = { strictUntilFeedback: false };

test('with the error budget unspent the loop loosens the admission quantile, step by step and within its bound', () => {
  const loop = new AdmissionThreshold(0.99, LAW);
  assert.equal(loop.quantile, 0.99);
  let t = feed(loop, 0, 50, 0, mulberry32(1));
  const after50 = loop.quantile;
  assert.ok(after50 < 0.98 && after50 > 0.9, `50 successes loosen, not all the way: ${after50}`);
  assert.ok(new AdmissionThreshold(0.6, LAW, 0.1).quantile === 0.5, 'and never below p50, whatever the target');
  t = feed(loop, t, 20_000, 0, mulberry32(2));
  assert.ok(
    Math.abs(loop.quantile - 0.8) < 1e-9,
    `never below the loosest bound, p80 at a 99% target: ${loop.quantile}`,
  );
  assert.match(loop.state(t).why, /loosest bound/);
});

test('misses tighten fast: a burst brings the quantile to its strictest bound, never past it', () => {
  const loop = new AdmissionThreshold(0.99, LAW);
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
  const loop = new AdmissionThreshold(0.99, LAW);
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
      if (loop.quantile > 0.999 - 1e-9 || loop.quantile <= 0.8 + 1e-9) atBound++;
    }
  }
  const missShare = misses / 60_000;
  assert.ok(Math.abs(missShare - loop.aimMiss) < loop.aimMiss * 0.25, `misses ${missShare} vs aim ${loop.aimMiss}`);
  assert.ok(lowest > 0.97, `never near "all local" (the loosest bound is p80): ${lowest}`);
  assert.ok(atBound < 50_000 * 0.02, `rarely at a bound: ${atBound}`);
});

test('misses of requests in flight together are one episode: a step, then a quarter step each', () => {
  const warm = () => {
    const loop = new AdmissionThreshold(0.99, LAW);
    feed(loop, 0, 2000, 0, mulberry32(3));
    return loop;
  };
  const together = warm();
  const loose = together.quantile;
  const t = 200_000;
  // Five requests admitted together, late together (a pod's queue surged): one piece of evidence.
  const settles = [0, 1, 2, 3, 4].map(() => together.admitted(t, 500));
  settles.forEach((settle, i) => settle(t + 600 + 50 * i, false));
  const missChance = (loop: AdmissionThreshold) => (1 - loop.quantile) / (1 - loose);
  assert.ok(Math.abs(missChance(together) - Math.exp(-0.5 - 4 * 0.125)) < 1e-9, `${together.quantile}`);
  assert.equal(together.state(t + 1000).measured - together.state(t + 1000).within, 5, 'each still a miss');
  assert.match(together.state(t + 1000).why, /in flight with an earlier one: tightened by a quarter step/);
  // Five sent one after the other, each after the last one's miss showed, as close in time: each
  // was admitted on the tightened quantile, so each is evidence of its own.
  const oneByOne = warm();
  for (let i = 0; i < 5; i++) oneByOne.admitted(t + 150 * i, 50)(t + 150 * i + 100, false);
  assert.ok(Math.abs(missChance(oneByOne) - Math.exp(-2.5)) < 1e-9, `${oneByOne.quantile}`);
  // A must-stay request sent before the episode began, late behind admitted ones: part of it.
  const starved = warm();
  const sentWith = starved.admissions;
  starved.admitted(t, 500)(t + 600, false);
  starved.starved(t + 700, sentWith);
  assert.ok(Math.abs(missChance(starved) - Math.exp(-0.5 - 0.125)) < 1e-9, `${starved.quantile}`);
});

test('misses that come one by one seldom share an episode: with many requests in flight the loop still settles at its aim', () => {
  // As above (miss = 2·(1 - q)), each request in flight for 1.5 s, 50 admitted a second: were any
  // misses among the ~75 in flight one episode, however far apart, it would settle 1.5× above its aim.
  const loop = new AdmissionThreshold(0.99, LAW);
  const rand = mulberry32(12);
  const inFlight: { at: number; miss: boolean; settle: (at: number, within?: boolean) => void }[] = [];
  let misses = 0;
  for (let t = 0; t < 1_200_000; t += 20) {
    while (inFlight.length && inFlight[0].at <= t) {
      const { at, miss, settle } = inFlight.shift()!;
      settle(at, !miss);
    }
    const miss = rand() < 2 * (1 - loop.quantile);
    if (miss) misses++;
    inFlight.push({ at: t + 1500, miss, settle: loop.admitted(t, 2000) });
  }
  const missShare = misses / 60_000;
  assert.ok(Math.abs(missShare - loop.aimMiss) < loop.aimMiss * 0.25, `misses ${missShare} vs aim ${loop.aimMiss}`);
});

test('attainment is measured over a sliding window: old outcomes leave it', () => {
  const loop = new AdmissionThreshold(0.99, { ...LAW, windowMs: 10_000, bucketMs: 1000 });
  feed(loop, 0, 10, 1, mulberry32(7), 100);
  assert.equal(loop.state(1000).measured, 10);
  assert.equal(loop.state(1000).within, 0);
  assert.equal(loop.state(20_000).measured, 0);
  assert.match(loop.state(20_000).why, /holding/);
});

test('one loop per policy, a changed target starts afresh, and the number of loops is bounded', () => {
  const loops = new AdmissionThresholds(LAW, 2);
  loops.for('a', 0.99).observe(0, false);
  assert.ok(loops.for('a', 0.99).quantile > 0.99);
  assert.equal(loops.for('b', 0.95).quantile, 0.95);
  assert.equal(loops.for('a', 0.9).quantile, 0.9, 'a new target, a new loop');
  loops.for('c', 0.99);
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
  const loop = new AdmissionThreshold(0.99, LAW);
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

test('admissions planned near the aim hold the loosening back before any miss is measured', () => {
  // Two loops, the same successes; one's admissions each carried the aim's miss chance by their
  // calibration (the budget is spent as planned), the other's almost none.
  const spent = new AdmissionThreshold(0.99, LAW);
  const unspent = new AdmissionThreshold(0.99, LAW);
  for (let i = 0, t = 0; i < 100; i++, t += 100) {
    spent.admitted(t, 800, spent.aimMiss)(t + 200, true);
    unspent.admitted(t, 800, 0)(t + 200, true);
  }
  assert.ok(1 - unspent.quantile > 3 * (1 - spent.quantile), `${unspent.quantile} vs ${spent.quantile}`);
  assert.ok(spent.quantile < 0.99, 'the planned budget slows the loop, it does not stop it');
  assert.ok(Math.abs(spent.state(10_000).plannedMiss - spent.aimMiss) < 1e-12);
});

test("a fresh loop admits at its strictest bound until the first admitted request's SLO has passed", () => {
  const loop = new AdmissionThreshold(0.99);
  assert.ok(Math.abs(loop.quantile - 0.999) < 1e-12, `${loop.quantile}`);
  const settle = loop.admitted(0, 800);
  settle(300, true);
  loop.expire(700);
  assert.ok(Math.abs(loop.quantile - 0.999) < 1e-12, 'no miss could have shown yet');
  assert.match(loop.state(700).why, /strictest bound/);
  loop.expire(801);
  assert.ok(loop.quantile < 0.99, `then from where the loop stands: ${loop.quantile}`);
});

test("a request's planned miss chance is what its pod's calibration says of its slack to the SLO", () => {
  // A calibration whose q-quantile margin is an exponential tail: margin(q) = log(1/(1 - q)) / 4.
  const candidate = { networkCostMs: 10, logMargin: (q: number) => Math.log(1 / (1 - q)) / 4 };
  const at = (predictedMs: number) => plannedMissChance({ candidate, predictedMs }, 810)!;
  // slack log(800 / 400) = 0.69: miss chance exp(-4 · 0.69) = 1/16.
  assert.ok(Math.abs(at(410) - 1 / 16) < 0.002, `${at(410)}`);
  assert.ok(at(60) <= 1e-4, 'far below the SLO: next to none');
  assert.equal(at(900), 0.5, 'over the SLO: at most the cap');
  assert.equal(plannedMissChance({ candidate: { networkCostMs: 0 }, predictedMs: 100 }, 800), undefined);
});

test('a window with no miss loosens with time as well: a pool admitting a request every 2 s reaches its loosest bound in a minute, not in minutes', () => {
  // Three loops from p99.9, the same successes every 2 s: with time (default), per outcome only,
  // and with time but admissions planned at the aim's miss chance (the budget spent as planned).
  const withTime = new AdmissionThreshold(0.99, LAW, 0.999);
  const perOutcome = new AdmissionThreshold(0.99, { ...LAW, cleanLoosenPerS: 0 }, 0.999);
  const planned = new AdmissionThreshold(0.99, LAW, 0.999);
  let t = 0;
  for (; t <= 60_000; t += 2000) {
    for (const loop of [withTime, perOutcome, planned]) {
      loop.expire(t);
      loop.admitted(t, 800, loop === planned ? loop.aimMiss : 1e-4)(t + 300, true);
    }
  }
  assert.ok(withTime.quantile < 0.85, `with time: ${withTime.quantile}`);
  assert.match(withTime.state(t).why, /loosening with time|loosest bound/);
  assert.ok(perOutcome.quantile > 0.99, `31 successes alone: ${perOutcome.quantile}`);
  assert.ok(
    planned.quantile > 0.99,
    `admissions planned at the aim hold it to the outcomes' pace: ${planned.quantile}`,
  );

  // Admissions planned near the edge earlier in the window, none lately: still near the edge.
  const [edge, edgeOutcomes] = [LAW, { ...LAW, cleanLoosenPerS: 0 }].map((o) => new AdmissionThreshold(0.99, o, 0.999));
  for (let u = 0; u <= 50_000; u += 2000) {
    for (const loop of [edge, edgeOutcomes]) {
      loop.expire(u);
      loop.admitted(u, 800, u < 40_000 ? 2 * loop.aimMiss : 1e-4)(u + 300, true);
    }
  }
  assert.equal(
    edge.quantile,
    edgeOutcomes.quantile,
    'no loosening with time while the window was planned near the edge',
  );

  // One miss, and the window is no longer clean: only outcomes move it for the next minute.
  const settle = withTime.admitted(t, 800, 1e-4);
  settle(t + 900, false);
  const afterMiss = withTime.quantile;
  for (t += 2000; t <= 110_000; t += 2000) withTime.expire(t);
  assert.equal(withTime.quantile, afterMiss, 'no loosening with time while the miss is in the window');
  withTime.expire(t + 20_000);
  assert.ok(withTime.quantile === afterMiss, 'nor once the window is empty of measurements');
});

test('a must-stay request late behind admitted ones is a miss of the loops that admitted them, and says so', () => {
  const ahead = new LeavableAhead<string>();
  const first = ahead.sent('pod-a', 'loop-1');
  const second = ahead.sent('pod-a', 'loop-1');
  const other = ahead.sent('pod-a', 'loop-2');
  ahead.sent('pod-b', 'loop-3');
  assert.deepEqual(ahead.at('pod-a'), ['loop-1', 'loop-2']);
  first();
  first(); // a second call changes nothing
  assert.deepEqual(ahead.at('pod-a'), ['loop-1', 'loop-2'], 'loop-1 still has a request awaiting its first token');
  second();
  other();
  assert.deepEqual(ahead.at('pod-a'), [], 'every first token is out: nothing ahead');
  assert.deepEqual(ahead.at('pod-b'), ['loop-3']);
  assert.deepEqual(ahead.at('pod-c'), []);

  // The same successes, and one loop also charged with a starved must-stay request.
  const charged = new AdmissionThreshold(0.99, LAW);
  const spared = new AdmissionThreshold(0.99, LAW);
  const t = feed(charged, 0, 500, 0, mulberry32(11));
  feed(spared, 0, 500, 0, mulberry32(11));
  assert.equal(charged.quantile, spared.quantile);
  charged.starved(t);
  assert.ok(charged.quantile > spared.quantile, `tightened: ${charged.quantile} vs ${spared.quantile}`);
  const state = charged.state(t);
  assert.equal(state.starved, 1);
  assert.equal(state.measured - state.within, 1, 'counted among the window misses');
  assert.match(state.why, /must-stay request missed its SLO behind admitted ones/);
  assert.equal(spared.state(t).starved, 0);
  assert.equal(charged.state(t + 61_000).starved, 0, 'it leaves with the window');
});
