// The batch share requests which may leave leave free, sized from what a pod's must-stay requests
// measure (agent/admission/batch-reserve.ts, steered in agent/pool/pod-records.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_BATCH_RESERVE, nextBatchReserve } from '../agent/admission/batch-reserve.ts';
import { PodPool, type PoolOptions } from '../agent/pool/pool.ts';
import { PodTelemetry } from '../agent/telemetry/pod-telemetry.ts';
import type { PodLoad } from '../agent/types.ts';
import { poolOptions, routePod } from './helpers/route-fixtures.ts';

const law = DEFAULT_BATCH_RESERVE;

test('the law: a late must-stay request that found no free slot raises the reserve, any other lowers it, within 0 and the bound', () => {
  assert.equal(nextBatchReserve(0.2, true, true, law), 0.2 + law.step);
  const lower = nextBatchReserve(0.2, false, false, law);
  assert.ok(lower < 0.2 && lower > 0.2 - law.step / 50, `${lower}`);
  // Late from a free slot says nothing about slots; on time from a full batch, it found one soon enough.
  assert.equal(nextBatchReserve(0.2, false, true, law), lower);
  assert.equal(nextBatchReserve(0.2, true, false, law), lower);
  assert.equal(nextBatchReserve(law.max, true, true, law), law.max);
  assert.equal(nextBatchReserve(0, false, false, law), 0);
});

test('the law settles where the target share of must-stay requests are late for want of a slot', () => {
  const run = (lateShare: number) => {
    let share = 0.2;
    const wide = { ...law, max: 0.9 };
    // Every 1/lateShare-th answer late at a full batch, the rest on time.
    for (let i = 1; i < 10_000; i++) share = nextBatchReserve(share, true, i % Math.round(1 / lateShare) === 0, wide);
    return share;
  };
  assert.ok(run(0.05) > 0.85, 'more late than the target: up to the bound');
  assert.ok(run(0.002) < 0.05, 'fewer: down to none');
});

const scrape = (p: PodPool, at: number, waiting: number, running: number) => {
  const load: PodLoad = { engine: 'vllm', at, waiting, running, kvCache: 0.1 };
  const telemetry = new PodTelemetry();
  telemetry.record(load);
  p.recordLoad('ns/a', load, telemetry);
};

/**
 * A pod of 4 slots whose full batch is slow (requests sent to it measured at 4× their
 * prediction, so a leavable request priced as at a full batch sees a wide margin), then
 * `mustStay` requests that may not leave, sent as `running` says, answered after `ttftMs`
 * against an SLO that leaves them 800 ms.
 */
function pod(options: Partial<PoolOptions> = {}) {
  const now = { t: 1000 };
  const p = new PodPool(poolOptions(() => now.t, { networkCostMs: 0, ...options }));
  p.setLocalPods([routePod('a', { node: 'n', engine: 'vllm' })]);
  scrape(p, now.t, 2, 4);
  for (let i = 0; i < 400; i++) {
    const full = i % 2 === 1;
    now.t += 100;
    scrape(p, now.t, 0, full ? 4 : 1);
    const ticket = p.begin(p.candidates()[0], 256);
    ticket.firstByte(ticket.predictedMs * (full ? 4 : 1) * (1 + 0.1 * Math.sin(i)));
    ticket.end(true);
  }
  return {
    /** `ttftMs` undefined: as predicted (in time, and nothing new for the calibration). */
    mustStay(n: number, running: number, ttftMs?: number) {
      for (let i = 0; i < n; i++) {
        now.t += 100;
        scrape(p, now.t, 0, running);
        const ticket = p.begin(p.candidates()[0], 256, 'chat', true, undefined, undefined, 800);
        ticket.firstByte(ttftMs ?? ticket.predictedMs);
        ticket.end(true);
      }
    },
    /** A leavable request's 95% log margin with `running` of the 4 slots taken. */
    marginAt(running: number) {
      now.t += 100;
      scrape(p, now.t, 0, running);
      return p.candidates()[0].logMargin!(0.95);
    },
  };
}

test('a pod whose must-stay requests find free slots and answer in time gives its reserve back to leavable ones', () => {
  const a = pod();
  // A new pod keeps the configured 3/8 (2 of 4 slots): at 2 running, a leavable request meets the full margin.
  assert.ok(a.marginAt(2) > Math.log(3.5), `fresh, 2 of 4: ×${Math.exp(a.marginAt(2)).toFixed(2)}`);
  a.mustStay(200, 1);
  assert.ok(a.marginAt(2) < Math.log(1.3), `after 200 in time, 2 of 4: ×${Math.exp(a.marginAt(2)).toFixed(2)}`);
  // Late answers from a free slot (a long prompt, a slow pod) say nothing about slots.
  a.mustStay(5, 1, 2000);
  assert.ok(a.marginAt(2) < Math.log(1.3), `late from free slots, 2 of 4: ×${Math.exp(a.marginAt(2)).toFixed(2)}`);
  // Must-stay requests that found the batch full and answered late take it back.
  a.mustStay(2, 4, 2000);
  assert.ok(a.marginAt(2) > Math.log(3.5), `late at a full batch, 2 of 4: ×${Math.exp(a.marginAt(2)).toFixed(2)}`);
});

test('the configured reserve is the bound: late must-stay requests never raise it past it', () => {
  const a = pod({ leavableBatchReserve: 0.25 });
  a.mustStay(20, 4, 2000);
  assert.ok(a.marginAt(2) < Math.log(1.3), `bound 1/4, 2 of 4: ×${Math.exp(a.marginAt(2)).toFixed(2)}`);
  assert.ok(a.marginAt(3) > Math.log(3.5), `bound 1/4, 3 of 4: ×${Math.exp(a.marginAt(3)).toFixed(2)}`);
});
