import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TimeWindow } from '../agent/telemetry/window.ts';
import { PodTelemetry, intervalDelta } from '../agent/telemetry/pod-telemetry.ts';
import type { PodLoad } from '../agent/types.ts';

const close = (actual: number, expected: number, tolerance = 1e-9) =>
  assert.ok(Math.abs(actual - expected) <= tolerance, `${actual} is not within ${tolerance} of ${expected}`);

test('a constant value averages to itself', () => {
  const w = new TimeWindow({ spanMs: 60_000, bucketMs: 500 });
  for (let t = 0; t <= 60_000; t += 25) w.record(t, 3);
  assert.equal(w.average(30_000, 60_000), 3);
  assert.equal(w.max(30_000, 60_000), 3);
});

test('the average is weighted by how long each value held, not by how many samples it had', () => {
  const w = new TimeWindow({ spanMs: 60_000, bucketMs: 1000 });
  // 10 s at 0 scraped once a second, then 10 s at 10 scraped every 25 ms.
  for (let t = 0; t < 10_000; t += 1000) w.record(t, 0);
  for (let t = 10_000; t <= 20_000; t += 25) w.record(t, 10);
  close(w.average(20_000, 20_000), 5);
});

test('the window covers only its last windowMs', () => {
  const w = new TimeWindow({ spanMs: 60_000, bucketMs: 500 });
  w.record(0, 100);
  w.record(30_000, 2); // 100 held for 30 s, then 2
  assert.equal(w.average(10_000, 40_000), 2);
  close(w.average(20_000, 40_000), 51); // half at 100, half at 2
  assert.equal(w.max(10_000, 40_000), 2);
  assert.equal(w.max(20_000, 40_000), 100);
});

test('a window boundary inside a bucket is pro-rated', () => {
  const w = new TimeWindow({ spanMs: 10_000, bucketMs: 1000 });
  w.record(0, 0);
  w.record(5_000, 10);
  w.record(10_000, 10);
  // [4500, 10000]: 500 ms of 0 then 5 s of 10.
  close(w.average(5_500, 10_000), (10 * 5000) / 5500);
});

test('the last value holds until now', () => {
  const w = new TimeWindow({ spanMs: 10_000, bucketMs: 100 });
  w.record(0, 4);
  assert.equal(w.average(1000, 0), 4);
  assert.equal(w.average(1000, 5_000), 4);
  w.record(5_000, 0);
  close(w.average(10_000, 10_000), 2);
});

test('memory stays bounded: old buckets are reused, long gaps keep only the tail', () => {
  const w = new TimeWindow({ spanMs: 2_000, bucketMs: 100 });
  for (let t = 0; t <= 1_000_000; t += 25) w.record(t, t < 999_000 ? 50 : 1);
  assert.equal(w.average(1_000, 1_000_000), 1);
  assert.equal(w.max(1_000, 1_000_000), 1);
  w.record(5_000_000, 7); // 4,000 s of 1 held: still only the span's buckets are touched
  assert.equal(w.average(2_000, 5_000_000), 1);
  assert.equal(w.average(2_000, 5_001_000), 4);
});

test('a query longer than the span is clamped to the span', () => {
  const w = new TimeWindow({ spanMs: 1_000, bucketMs: 100 });
  w.record(0, 100);
  w.record(10_000, 0);
  assert.equal(w.average(60_000, 10_500), w.average(1_000, 10_500));
  assert.equal(w.average(60_000, 10_500), 50); // [9500, 10500]: 100 until 10 s, then 0
});

test('NaN marks the value unknown; nothing known gives NaN', () => {
  const w = new TimeWindow({ spanMs: 10_000, bucketMs: 100 });
  assert.ok(Number.isNaN(w.average(1000, 0)));
  assert.ok(Number.isNaN(w.max(1000, 0)));
  w.record(0, 2);
  w.record(1000, NaN);
  w.record(3000, 4);
  close(w.average(4000, 4000), 3); // 1 s of 2, 2 s unknown, 1 s of 4
  const kv = new TimeWindow();
  for (let t = 0; t < 5000; t += 100) kv.record(t, NaN);
  assert.ok(Number.isNaN(kv.average(30_000, 5000)));
});

test('out-of-order samples are dropped', () => {
  const w = new TimeWindow({ spanMs: 10_000, bucketMs: 100 });
  w.record(1000, 1);
  w.record(500, 100);
  assert.equal(w.max(10_000, 2000), 1);
});

test('rejects a window that cannot work', () => {
  assert.throws(() => new TimeWindow({ spanMs: 10, bucketMs: 0 }));
  assert.throws(() => new TimeWindow({ spanMs: 10, bucketMs: 100 }));
});

const load = (at: number, extra: Partial<PodLoad> = {}): PodLoad => ({
  at,
  engine: 'vllm',
  waiting: 0,
  running: 0,
  kvCache: 0,
  ...extra,
});

test('the TTFT delta is the mean of the requests that got their first token in the interval', () => {
  const delta = intervalDelta(
    load(1000, { ttftSum: 10, ttftCount: 20, finished: 5, promptTokens: 100 }),
    load(1100, { ttftSum: 13, ttftCount: 26, finished: 9, promptTokens: 100 }),
  );
  assert.equal(delta.intervalMs, 100);
  assert.equal(delta.ttft?.count, 6);
  close(delta.ttft?.mean ?? NaN, 0.5);
  assert.equal(delta.finished, 4);
  assert.equal(delta.promptTokens, 0);
  assert.equal(delta.queueTime, undefined);
});

test('no request finishing gives a count of 0 and no mean; a restart counts from zero', () => {
  const idle = intervalDelta(load(0, { ttftSum: 10, ttftCount: 20 }), load(100, { ttftSum: 10, ttftCount: 20 }));
  assert.equal(idle.ttft?.count, 0);
  assert.ok(Number.isNaN(idle.ttft?.mean));
  const restarted = intervalDelta(
    load(0, { ttftSum: 10, ttftCount: 20, finished: 50 }),
    load(100, { ttftSum: 0.6, ttftCount: 2, finished: 2 }),
  );
  assert.equal(restarted.ttft?.count, 2);
  close(restarted.ttft?.mean ?? NaN, 0.3);
  assert.equal(restarted.finished, 2);
});

test('PodTelemetry keeps windows of the scraped gauges and the last delta', () => {
  const pod = new PodTelemetry({ spanMs: 60_000, bucketMs: 250 });
  assert.equal(pod.record(load(0, { waiting: 4, running: 8, kvCache: 0.5, ttftSum: 0, ttftCount: 0 })), undefined);
  pod.record(load(10_000, { waiting: 0, running: 8, kvCache: 0.9, ttftSum: 2, ttftCount: 4 }));
  pod.record(load(20_000, { waiting: 0, running: 2, kvCache: 0.9, ttftSum: 2, ttftCount: 4 }));
  close(pod.average('queued', 20_000), 2);
  close(pod.average('queued', 30_000, 30_000), 4 / 3);
  assert.equal(pod.max('queued', 5_000), 0);
  assert.equal(pod.max('running', 20_000), 8);
  close(pod.average('kvCache', 20_000), 0.7);
  assert.equal(pod.max('kvCache', 30_000), 0.9);
  close(pod.average('running', 20_000, 30_000), (8 * 10 + 2 * 10) / 20);
  assert.equal(pod.latest?.at, 20_000);
  assert.equal(pod.lastDelta?.ttft?.count, 0);
  pod.markUnknown(25_000); // e.g. scrapes started failing: 0 held until 25 s, then unknown
  assert.equal(pod.average('queued', 30_000, 40_000), 0);
  assert.ok(Number.isNaN(pod.average('queued', 10_000, 40_000)));
  assert.ok(Number.isNaN(pod.max('running', 10_000, 40_000)));
});

test('averages at a real clock (bucket numbers past 2^31, slots wrapping) are those of the same samples near zero', () => {
  const near = new TimeWindow({ spanMs: 60_000, bucketMs: 500 });
  const far = new TimeWindow({ spanMs: 60_000, bucketMs: 500 });
  const offset = 1_764_000_000_000; // a Date.now() of 2025, a multiple of the bucket
  for (let t = 0; t <= 200_000; t += 100 + (t % 7)) {
    const value = (t / 100) % 9;
    near.record(t, value);
    far.record(offset + t, value);
  }
  for (const windowMs of [1_000, 30_000, 60_000, 90_000])
    for (const now of [200_000, 200_050, 230_000, 250_000, 300_000])
      assert.equal(far.average(windowMs, offset + now), near.average(windowMs, now));
});

/** The window as first written: a slot per bucket in four arrays, every bucket weighed and its slot
 *  a modulo. The oracle for the cells and the peeled loop, which must read the same bits. */
class WeighedWindow {
  readonly size: number;
  readonly epoch: Float64Array;
  readonly integral: Float64Array;
  readonly covered: Float64Array;
  readonly most: Float64Array;
  lastAt = NaN;
  lastValue = NaN;
  readonly spanMs: number;
  readonly bucketMs: number;
  constructor(spanMs: number, bucketMs: number) {
    this.spanMs = spanMs;
    this.bucketMs = bucketMs;
    this.size = Math.ceil(spanMs / bucketMs) + 1;
    this.epoch = new Float64Array(this.size).fill(NaN);
    this.integral = new Float64Array(this.size);
    this.covered = new Float64Array(this.size);
    this.most = new Float64Array(this.size);
  }
  record(at: number, value: number): void {
    if (!Number.isFinite(at) || at < this.lastAt) return;
    if (!Number.isNaN(this.lastAt)) this.hold(this.lastAt, at, this.lastValue);
    this.lastAt = at;
    this.lastValue = value;
    if (!Number.isNaN(value)) {
      const slot = this.slotFor(Math.floor(at / this.bucketMs));
      if (value > this.most[slot]) this.most[slot] = value;
    }
  }
  average(windowMs: number, now: number): number {
    const from = now - Math.min(windowMs, this.spanMs);
    let integral = 0;
    let covered = 0;
    const first = Math.floor(from / this.bucketMs);
    const last = Math.floor(now / this.bucketMs);
    for (let b = Math.max(first, last - this.size + 1); b <= last; b++) {
      const slot = this.slotOf(b);
      if (this.epoch[slot] !== b) continue;
      const weight = b === first ? ((b + 1) * this.bucketMs - from) / this.bucketMs : 1;
      integral += this.integral[slot] * weight;
      covered += this.covered[slot] * weight;
    }
    if (!Number.isNaN(this.lastValue) && now > this.lastAt) {
      const held = now - Math.max(this.lastAt, from);
      if (held > 0) {
        integral += this.lastValue * held;
        covered += held;
      }
    }
    if (covered > 0) return integral / covered;
    return this.lastAt >= from ? this.lastValue : NaN;
  }
  max(windowMs: number, now: number): number {
    const from = now - Math.min(windowMs, this.spanMs);
    let best = -Infinity;
    const last = Math.floor(now / this.bucketMs);
    for (let b = Math.max(Math.floor(from / this.bucketMs), last - this.size + 1); b <= last; b++) {
      const slot = this.slotOf(b);
      if (this.epoch[slot] === b && this.most[slot] > best) best = this.most[slot];
    }
    if (!Number.isNaN(this.lastValue) && this.lastValue > best && this.lastAt <= now) best = this.lastValue;
    return best === -Infinity ? NaN : best;
  }
  hold(from: number, to: number, value: number): void {
    if (Number.isNaN(value) || to <= from) return;
    from = Math.max(from, to - this.size * this.bucketMs);
    let b = Math.floor(from / this.bucketMs);
    let t = from;
    while (t < to) {
      const segmentEnd = Math.min((b + 1) * this.bucketMs, to);
      const slot = this.slotFor(b);
      this.integral[slot] += value * (segmentEnd - t);
      this.covered[slot] += segmentEnd - t;
      if (value > this.most[slot]) this.most[slot] = value;
      t = segmentEnd;
      b++;
    }
  }
  slotOf(bucket: number): number {
    return ((bucket % this.size) + this.size) % this.size;
  }
  slotFor(bucket: number): number {
    const slot = this.slotOf(bucket);
    if (this.epoch[slot] !== bucket) {
      this.epoch[slot] = bucket;
      this.integral[slot] = 0;
      this.covered[slot] = 0;
      this.most[slot] = -Infinity;
    }
    return slot;
  }
}

test('averages and maxima read the same bits as weighing every bucket, at real clocks, fractional times and gaps', () => {
  let seed = 7;
  const rand = () => ((seed = (seed * 16807) % 2147483647) - 1) / 2147483646;
  for (const [spanMs, bucketMs] of [
    [60_000, 500],
    [10_000, 250],
    [5_000, 300],
  ]) {
    for (const origin of [0, 1_764_000_000_000.25, 2 ** 40 + 0.5, -123_456.75]) {
      const w = new TimeWindow({ spanMs, bucketMs });
      const ref = new WeighedWindow(spanMs, bucketMs);
      let t = origin;
      for (let i = 0; i < 3000; i++) {
        // Scrapes every ~100 ms, now and then a long gap or an unknown value.
        t += rand() < 0.01 ? rand() * 3 * spanMs : 50 + rand() * 100;
        const value = rand() < 0.02 ? NaN : Math.floor(rand() * 5) + (rand() < 0.3 ? rand() : 0);
        w.record(t, value);
        ref.record(t, value);
        if (i % 7 !== 0) continue;
        for (const windowMs of [bucketMs, 1_000, 30_000, spanMs, 2 * spanMs]) {
          const now = t + rand() * 2 * bucketMs;
          assert.ok(Object.is(w.average(windowMs, now), ref.average(windowMs, now)), `average at ${now}`);
          assert.ok(Object.is(w.max(windowMs, now), ref.max(windowMs, now)), `max at ${now}`);
        }
      }
      assert.ok(Object.is(w.average(1_000, NaN), ref.average(1_000, NaN)));
    }
  }
});

/** The largest double below x (x finite, not 0). */
function below(x: number): number {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  view.setBigInt64(0, view.getBigInt64(0) + (x > 0 ? -1n : 1n));
  return view.getFloat64(0);
}

test('averageAtMost is never true when the average is above the limit, and decides the clear cases from kept sums', () => {
  let seed = 11;
  const rand = () => ((seed = (seed * 16807) % 2147483647) - 1) / 2147483646;
  let certain = 0;
  let asked = 0;
  for (const origin of [0, 1_764_000_000_000.25, -98_765.5]) {
    const w = new TimeWindow({ spanMs: 60_000, bucketMs: 500 });
    let t = origin;
    for (let i = 0; i < 4000; i++) {
      t += rand() < 0.01 ? rand() * 90_000 : 50 + rand() * 100;
      const value = rand() < 0.02 ? NaN : (rand() < 0.05 ? -1 : 1) * (Math.floor(rand() * 5) + rand());
      w.record(t, value);
      for (const windowMs of [1_000, 30_000, 60_000, 120_000]) {
        // Several decisions between two scrapes, as a serving agent makes them.
        for (let k = 0; k < 3; k++) {
          const now = t + rand() * 600;
          const average = w.average(windowMs, now);
          if (Number.isNaN(average)) {
            assert.equal(w.averageAtMost(windowMs, now, Infinity), false);
            continue;
          }
          // The limits that matter: at the average, a double either side of it, and farther off.
          for (const limit of [average, below(average), -below(-average), average - 0.5, 2]) {
            const atMost = w.averageAtMost(windowMs, now, limit);
            assert.ok(!atMost || average <= limit, `average ${average} > limit ${limit} at ${now}`);
          }
          assert.equal(w.averageAtMost(windowMs, now, below(average)), false);
          // A limit a millionth away is clear: kept sums decide it.
          asked++;
          if (w.averageAtMost(windowMs, now, average + 1e-6 * (1 + Math.abs(average)))) certain++;
        }
      }
    }
  }
  assert.ok(certain / asked > 0.4, `certain in ${certain} of ${asked}`);
});
