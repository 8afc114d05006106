// A pod's full batch as a calibration regime of its own, and the share of the batch that requests
// which may leave do not take (agent/predict/calibration.ts, agent/pool/candidates.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PodPool, type PoolOptions } from '../agent/pool/pool.ts';
import { PodTelemetry } from '../agent/telemetry/pod-telemetry.ts';
import type { PodLoad } from '../agent/types.ts';
import { decide } from '../agent/route/router.ts';
import { predictedTtft } from '../agent/route/score.ts';
import { poolOptions, routePod, routePolicy, routeRequest, STAY } from './helpers/route-fixtures.ts';

const scrape = (p: PodPool, at: number, waiting: number, running: number) => {
  const load: PodLoad = { engine: 'vllm', at, waiting, running, kvCache: 0.1 };
  const telemetry = new PodTelemetry();
  telemetry.record(load);
  p.recordLoad('ns/a', load, telemetry);
};

/**
 * A pod of 4 slots, seen queueing beside a full batch once; then requests sent with nothing
 * queued, alternately to a free slot (measured as predicted, ±10%) and to its full batch
 * (measured at 4× the prediction: they wait for a slot, which no feature shows).
 */
function taught(options: Partial<PoolOptions> = {}) {
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
  const marginAt = (running: number, q = 0.95) => {
    now.t += 100;
    scrape(p, now.t, 0, running);
    return p.candidates()[0].logMargin!(q);
  };
  return { marginAt, candidate: () => p.candidates()[0] };
}

test("requests sent to a full batch are calibrated apart: a free slot's margin stays narrow", () => {
  const { marginAt } = taught();
  // Mixed into one distribution, every free slot's 95% margin was the full batch's ×4.
  const free = marginAt(1);
  assert.ok(free < Math.log(1.3), `free slot: ×${Math.exp(free).toFixed(2)}`);
  const full = marginAt(4);
  assert.ok(full > Math.log(3.5), `full batch: ×${Math.exp(full).toFixed(2)}`);
});

test('a request that may leave does not take the batch share reserved for those that cannot: it meets the full margin there', () => {
  const reserved = taught({ leavableBatchReserve: 0.25 });
  assert.ok(reserved.marginAt(3) > Math.log(3.5), `3 of 4 running: ×${Math.exp(reserved.marginAt(3)).toFixed(2)}`);
  assert.ok(reserved.marginAt(2) < Math.log(1.3), `2 of 4 running: ×${Math.exp(reserved.marginAt(2)).toFixed(2)}`);
  const byDefault = taught();
  assert.ok(
    byDefault.marginAt(2) > Math.log(3.5),
    `default, 2 of 4 running: ×${Math.exp(byDefault.marginAt(2)).toFixed(2)}`,
  );
  const none = taught({ leavableBatchReserve: 0 });
  assert.ok(none.marginAt(3) < Math.log(1.3), `no reserve, 3 of 4 running: ×${Math.exp(none.marginAt(3)).toFixed(2)}`);
});

test('a request that cannot leave is judged on the mean as measured: into a full batch, the mean it falls short by', () => {
  const { marginAt, candidate } = taught();
  marginAt(4);
  const full = candidate();
  // The model predicts a full batch like a free slot; its requests met 4× that.
  const bias = full.meanLogBias!();
  assert.ok(bias > Math.log(3.5) && bias < Math.log(4.5), `full batch: ×${Math.exp(bias).toFixed(2)}`);
  marginAt(1);
  assert.equal(candidate().meanLogBias!(), 0, 'a free slot: the model as it is');
  // An SLO twice the mean: met at a free slot, not behind a full batch. It waits for a slot.
  const request = routeRequest({ promptTokens: 256 });
  const policy = routePolicy({ sloTtftMs: 2 * predictedTtft(full, request), waitMaxMs: 2000 });
  const verdict = decide({ request, policy, candidates: [full], leave: STAY, waitedMs: 0, rand: () => 0 });
  assert.equal(verdict.action, 'wait');
});
