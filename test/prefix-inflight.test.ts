// Prompts still being prefilled at a pod: its KV events cannot show them yet, but a request sent
// behind them finds them computed. For pods the precise index decides, the pool counts them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PodPool } from '../agent/pool/pool.ts';
import { promptBlocks } from '../agent/prefix/blocks.ts';
import { InflightPrefixes } from '../agent/prefix/inflight.ts';
import { PreciseIndex } from '../agent/prefix/precise-index.ts';
import { PodTelemetry } from '../agent/telemetry/pod-telemetry.ts';
import type { PodLoad } from '../agent/types.ts';
import { poolOptions, routePod } from './helpers/route-fixtures.ts';

const withQuery = (q: string) => promptBlocks('c'.repeat(64 * 40) + q.repeat(64 * 5));

test('in-flight prefixes: the longest run shared with a prompt in flight, released one prompt at a time', () => {
  const inflight = new InflightPrefixes();
  const a = withQuery('a');
  const b = withQuery('b');
  const releaseA = inflight.add('p', a);
  const releaseB = inflight.add('p', b);
  assert.equal(inflight.leadingBlocks('p', a), 45);
  assert.equal(inflight.leadingBlocks('p', withQuery('z')), 40); // the shared context only
  assert.equal(inflight.leadingBlocks('q', a), 0); // another pod
  releaseA();
  releaseA(); // once is enough
  assert.equal(inflight.leadingBlocks('p', a), 40); // b still holds the context
  releaseB();
  assert.equal(inflight.leadingBlocks('p', a), 0);
  assert.equal(inflight.leadingBlocks('p', []), 0);
});

test('a pod prefilling a context counts it as cached for the next request, until that prefill is done', () => {
  const now = { t: 1000 };
  const pool = new PodPool(poolOptions(() => now.t));
  const pods = ['a', 'b'].map((x) => routePod(x, { engine: 'vllm' }));
  pool.setLocalPods(pods);
  // Events in step, and nothing stored yet: the engines' caches are empty.
  pool.attachPreciseIndex(new PreciseIndex(), () => true);
  const load: PodLoad = { engine: 'vllm', at: now.t, waiting: 0, running: 0, kvCache: 0, kvCapacityTokens: 1 << 16 };
  for (const pod of pods) {
    const telemetry = new PodTelemetry();
    telemetry.record(load);
    pool.recordLoad(pod.uid, load, telemetry);
  }
  const ids = Array.from({ length: 45 * 16 }, (_, i) => i);
  const cachedAt = (blocks: number[]) =>
    new Map(pool.candidates('m', blocks, { ids }).map((c) => [c.pod.uid, c.expectedCachedTokens ?? 0]));
  assert.deepEqual([...cachedAt(withQuery('a')).values()], [0, 0]);

  const first = pool.candidates('m', withQuery('a'), { ids })[0];
  const ticket = pool.begin(first, 45 * 16, 'chat', true, withQuery('a'));
  // A second user of the same customer: pod a is computing the context now.
  let cached = cachedAt(withQuery('b'));
  assert.equal(cached.get(first.pod.uid), 40 * 16);
  assert.equal(cached.get(pods[1].uid), 0);
  // Its first token: the prefill is done, and from now on the engine's events say what it holds.
  ticket.firstByte(500);
  cached = cachedAt(withQuery('b'));
  assert.equal(cached.get(first.pod.uid), 0);
  ticket.end(true);
});
