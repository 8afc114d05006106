// The quantile estimator behind calibrated admission: cold start, a shift in load, a pod that
// suddenly slows. Deterministic: seeded noise, no clock.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Calibration } from '../agent/predict/calibration.ts';
import { mulberry32 } from '../shared/sim/random.ts';

/** log-normal measurement noise around the prediction: measured = predicted · exp(σ·z). */
function gaussian(rand: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
}

function feed(c: Calibration, uid: string, n: number, sigma: number, bias: number, rand: () => number): void {
  for (let i = 0; i < n; i++) c.observe(uid, 100, 100 * Math.exp(bias + sigma * gaussian(rand)));
}

test('a pod with no history is uncertain, not fast: its margin is the cold margin (×3), and it shrinks only as evidence comes', () => {
  const c = new Calibration();
  assert.equal(c.margin('pod-a', 0.99), Math.log(3));
  assert.equal(c.margin(undefined, 0.99), Math.log(3), 'a peer pod with nothing known about the node');
  const rand = mulberry32(1);
  feed(c, 'pod-a', 20, 0.1, 0, rand);
  // 20 accurate observations are far from enough for a 99% quantile: still at least the cold margin.
  assert.ok(c.margin('pod-a', 0.99) >= Math.log(3) * 0.8, `${c.margin('pod-a', 0.99)}`);
  feed(c, 'pod-a', 400, 0.1, 0, rand);
  const warm = c.margin('pod-a', 0.99);
  // Warm: the empirical 99% quantile of N(0, 0.1) in log space, about 0.233.
  assert.ok(warm > 0.15 && warm < 0.35, `${warm}`);
  assert.ok(c.margin('pod-a', 0.9) < warm, 'a lower attainment needs a smaller margin');
});

test('a new pod on a warm node starts at the node margin, however wide', () => {
  const c = new Calibration();
  feed(c, 'pod-a', 400, 0.6, 0, mulberry32(2));
  const nodeMargin = c.margin(undefined, 0.99);
  assert.ok(nodeMargin > Math.log(3), `wide errors make a wide node margin: ${nodeMargin}`);
  assert.equal(c.margin('pod-new', 0.99), nodeMargin);
});

test('a new pod on a warm node with accurate predictions starts at the node margin, not cold (×3)', () => {
  const c = new Calibration();
  feed(c, 'pod-a', 400, 0.1, 0, mulberry32(5));
  const nodeMargin = c.margin(undefined, 0.99);
  assert.ok(nodeMargin < Math.log(1.5), `${nodeMargin}`);
  assert.equal(c.margin('pod-new', 0.99), nodeMargin);
});

test('a cold node is uncertain in proportion to the quantile asked: looser admission, smaller cold margin', () => {
  const c = new Calibration();
  assert.equal(c.margin(undefined, 0.99), Math.log(3));
  assert.ok(c.margin(undefined, 0.9) < Math.log(3) / 1.9 && c.margin(undefined, 0.9) > Math.log(3) / 2.1);
  assert.ok(c.margin(undefined, 0.999) > Math.log(3) * 1.4);
});

test('the margin covers the q-quantile: about q of the next measurements fall within it', () => {
  const c = new Calibration();
  const rand = mulberry32(3);
  feed(c, 'pod-a', 300, 0.3, 0.1, rand);
  const margin = c.margin('pod-a', 0.95);
  let within = 0;
  const n = 4000;
  for (let i = 0; i < n; i++) if (0.1 + 0.3 * gaussian(rand) <= margin) within++;
  assert.ok(Math.abs(within / n - 0.95) < 0.03, `${within / n}`);
});

test('a shift in load widens the margin at once, before the window has turned over', () => {
  const c = new Calibration();
  const rand = mulberry32(4);
  feed(c, 'pod-a', 256, 0.1, 0, rand);
  const before = c.margin('pod-a', 0.99);
  // Load rises faster than the mean model follows: the last 16 measurements run 50% late.
  feed(c, 'pod-a', 16, 0.1, Math.log(1.5), rand);
  const after = c.margin('pod-a', 0.99);
  assert.ok(after - before > Math.log(1.5) * 0.7, `before ${before}, after ${after}`);
  assert.ok(c.stats('pod-a').recentBias > 0.3);
});

test('a pod that suddenly slows 3× gets a margin covering it within a few dozen requests, and only that pod', () => {
  const c = new Calibration();
  const rand = mulberry32(5);
  feed(c, 'fast', 300, 0.1, 0, rand);
  feed(c, 'slows', 300, 0.1, 0, rand);
  const fastBefore = c.margin('fast', 0.99);
  feed(c, 'slows', 32, 0.1, Math.log(3), rand);
  assert.ok(c.margin('slows', 0.99) >= Math.log(3), `${c.margin('slows', 0.99)}`);
  assert.equal(c.margin('fast', 0.99), fastBefore);
  // Forgotten pods (gone from discovery) start over cold.
  c.forget('slows');
  assert.ok(c.margin('slows', 0.99) >= Math.log(3));
});

test('nonsense measurements are ignored', () => {
  const c = new Calibration();
  c.observe('pod-a', 0, 100);
  c.observe('pod-a', 100, Number.NaN);
  c.observe('pod-a', 100, -5);
  c.observe('pod-a', Infinity, 100);
  assert.equal(c.stats('pod-a').observations, 0);
});

test('requests that found a queue have their own distribution: calm errors do not understate them', () => {
  const c = new Calibration();
  const rand = mulberry32(6);
  for (let i = 0; i < 400; i++) {
    c.observe('pod-a', 100, 100 * Math.exp(0.05 * gaussian(rand)), 'free');
    c.observe('pod-a', 100, 100 * Math.exp(0.5 * gaussian(rand)), 'queued');
  }
  const free = c.margin('pod-a', 0.99, 'free');
  const queued = c.margin('pod-a', 0.99, 'queued');
  assert.ok(free < 0.2 && queued > 0.9, `free ${free}, queued ${queued}`);
});

test('a margin asked again, for another quantile or after each measurement, is what a fresh calibration of the same measurements gives', () => {
  const seen = new Calibration();
  const rand = mulberry32(9);
  const measured: number[] = [];
  for (let i = 0; i < 300; i++) {
    const ms = 100 * Math.exp(0.2 * gaussian(rand) + (i > 250 ? 0.4 : 0));
    measured.push(ms);
    seen.observe('pod', 100, ms, i % 3 === 0 ? 'queued' : 'free');
    const fresh = new Calibration();
    measured.forEach((m, k) => fresh.observe('pod', 100, m, k % 3 === 0 ? 'queued' : 'free'));
    for (const q of [0.99, 0.9, 0.99]) {
      for (const regime of ['free', 'queued'] as const) {
        assert.equal(seen.margin('pod', q, regime), fresh.margin('pod', q, regime));
        assert.equal(seen.margin(undefined, q, regime), fresh.margin(undefined, q, regime));
      }
    }
  }
});

test("a pod's margin is the q-quantile of exactly its last `window` errors, ties and turnover included", () => {
  // recent > any count: no shift; minWarmObservations 1: past a few observations the pod's own
  // quantile alone, so the margin is the window's quantile as a plain sort of it gives it.
  const window = 8;
  const c = new Calibration({ window, recent: 10_000, minWarmObservations: 1 });
  const rand = mulberry32(21);
  const errors: number[] = [];
  for (let i = 0; i < 400; i++) {
    // Few distinct ratios, so equal values enter and leave the window often.
    const ratio = [0.5, 1, 1, 2, 4][Math.floor(rand() * 5)] * (i % 50 === 0 ? 1000 : 1);
    errors.push(Math.log(ratio));
    c.observe('pod', 100, 100 * ratio);
    const kept = errors.slice(-window).sort((a, b) => a - b);
    for (const q of [0.5, 0.75, 0.9]) {
      if (errors.length < Math.ceil(2 / (1 - q))) continue; // still blended with the cold margin
      const rank = Math.min(kept.length, Math.max(1, Math.ceil(q * (kept.length + 1))));
      assert.equal(c.margin('pod', q), kept[rank - 1], `after ${i + 1} observations, q=${q}`);
    }
  }
});

test("a slow pool's window forgets a cold start's errors after a minute, not after 256 observations", () => {
  const c = new Calibration();
  const rand = mulberry32(7);
  // A cold start: 100 requests in 10 s measured at 3× their prediction (a model not yet learned).
  for (let i = 0; i < 100; i++) c.observe('pod-a', 100, 300 * Math.exp(0.05 * gaussian(rand)), 'free', i * 100);
  // Then one request a second, predicted well.
  for (let i = 0; i < 100; i++)
    c.observe('pod-a', 100, 100 * Math.exp(0.05 * gaussian(rand)), 'free', 70_000 + i * 1000);
  // Kept by count alone, the 90% margin was the cold start's ×3.
  const margin = c.margin('pod-a', 0.9);
  assert.ok(margin < Math.log(1.3), `×${Math.exp(margin).toFixed(2)}`);
  assert.equal(c.stats('pod-a').observations, 200, 'the evidence counted is every observation');
});

test('however old, a window keeps its last 64 observations: a pod that went quiet keeps a margin', () => {
  const c = new Calibration();
  const rand = mulberry32(8);
  for (let i = 0; i < 100; i++) c.observe('pod-a', 100, 300 * Math.exp(0.05 * gaussian(rand)), 'free', i * 100);
  c.observe('pod-a', 100, 100, 'free', 600_000);
  assert.ok(c.margin('pod-a', 0.9) > Math.log(2.5), 'the last 64 still answer');
});
