import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parsePromText } from '../agent/telemetry/promtext.ts';
import {
  ADAPTERS,
  ANY_ENGINE_SELECTOR,
  detectEngine,
  onePerDpGroup,
  toPodLoad,
  type LoadResult,
} from '../agent/telemetry/adapters.ts';
import { intervalDelta } from '../agent/telemetry/pod-telemetry.ts';
import type { Engine, PodLoad } from '../agent/types.ts';

const fixture = (name: string) => readFileSync(new URL(`./fixtures/metrics/${name}`, import.meta.url), 'utf8');

function load(result: LoadResult): PodLoad {
  assert.ok(result.ok, result.ok ? '' : result.error);
  return result.load;
}

/** Parse with the adapter's own selector, as the scraper does for a configured engine. */
function adapt(engine: Engine, name: string, at = 1000): PodLoad {
  return load(ADAPTERS[engine].toLoad(parsePromText(fixture(name), ADAPTERS[engine].selector), at));
}

test('vLLM: sums queues across engines, averages KV use, reads TTFT, queue time and counters', () => {
  assert.deepEqual(adapt('vllm', 'vllm-v1-two-engines.txt'), {
    at: 1000,
    engine: 'vllm',
    waiting: 7,
    running: 21,
    kvCache: 0.5, // kv_cache_usage_perc wins over the deprecated gpu_cache_usage_perc on the same page
    ttftSum: 126.75,
    ttftCount: 1536,
    queueTimeSum: 20.75,
    queueTimeCount: 1668,
    promptTokens: 2_222_221,
    generationTokens: 802_467,
    finished: 1668,
    kvCapacityTokens: 2 * 27_910 * 16, // cache_config_info: num_gpu_blocks × block_size, per engine
    // lora_requests_info: the newest label set (agent/telemetry/lora.ts)
    lora: {
      maxLora: 4,
      running: ['sql-lora', 'chat-lora'],
      waiting: ['sql-lora'],
      resident: ['sql-lora', 'chat-lora'],
    },
  });
});

test('vLLM before 0.9: gpu_cache_usage_perc, no engine label, no queue-time histogram', () => {
  assert.deepEqual(adapt('vllm', 'vllm-v0-pre09.txt'), {
    at: 1000,
    engine: 'vllm',
    waiting: 2,
    running: 7,
    kvCache: 0.8731,
    ttftSum: 9.75,
    ttftCount: 100,
    promptTokens: 52211,
    generationTokens: 18230,
    finished: 100,
    kvCapacityTokens: 7281 * 16,
  });
});

test('vLLM over OpenMetrics reads the same way', () => {
  const result = adapt('vllm', 'vllm-openmetrics.txt');
  assert.equal(result.waiting, 1);
  assert.equal(result.running, 5);
  assert.equal(result.kvCache, 0.25);
  assert.equal(result.ttftCount, 30);
  assert.equal(result.promptTokens, 4096);
  assert.equal(result.finished, 30);
});

test('TGI: queue and batch gauges, no KV (NaN), no TTFT, counters without _total', () => {
  assert.deepEqual(adapt('tgi', 'tgi.txt'), {
    at: 1000,
    engine: 'tgi',
    waiting: 11,
    running: 6,
    kvCache: NaN,
    queueTimeSum: 17.812004118,
    queueTimeCount: 405,
    promptTokens: 201377,
    generationTokens: 60321,
    finished: 405,
  });
});

test('SGLang under tensor parallelism counts the repeated queue once', () => {
  assert.deepEqual(adapt('sglang', 'sglang-tp2.txt'), {
    at: 1000,
    engine: 'sglang',
    waiting: 5,
    running: 17,
    kvCache: 0.72,
    ttftSum: 235.18979474117756,
    ttftCount: 325,
    queueTimeSum: 41.5,
    queueTimeCount: 320,
    promptTokens: 8_128_902,
    generationTokens: 7_557_572,
    finished: 325,
  });
});

test('SGLang with data parallelism adds one rank per dp group', () => {
  const result = adapt('sglang', 'sglang-dp2-tp2.txt');
  assert.equal(result.waiting, 2 + 7);
  assert.equal(result.running, 10 + 14);
  assert.equal(result.kvCache, 0.7);
  assert.equal(result.finished, 1000);
  assert.equal(result.ttftCount, undefined);
});

test('picks the lowest tp rank in each dp group, whatever the order', () => {
  const s = (labels: Record<string, string>, value: number) => ({ labels, value });
  const picked = onePerDpGroup([
    s({ tp_rank: '3', dp_rank: '1' }, 31),
    s({ tp_rank: '1', dp_rank: '0' }, 10),
    s({ tp_rank: '2', dp_rank: '1' }, 21),
    s({ tp_rank: '0', dp_rank: '0' }, 0),
  ]);
  assert.deepEqual(picked.map((p) => p.value).sort(), [0, 21]);
  assert.deepEqual(
    onePerDpGroup([s({ pid: '1' }, 1), s({ pid: '2' }, 2)]).map((p) => p.value),
    [1, 2],
  );
});

test('detects the engine from the page', () => {
  const detect = (name: string) => detectEngine(parsePromText(fixture(name), ANY_ENGINE_SELECTOR));
  assert.equal(detect('vllm-v1-two-engines.txt'), 'vllm');
  assert.equal(detect('vllm-v0-pre09.txt'), 'vllm');
  assert.equal(detect('vllm-openmetrics.txt'), 'vllm');
  assert.equal(detect('tgi.txt'), 'tgi');
  assert.equal(detect('sglang-tp2.txt'), 'sglang');
  assert.equal(detect('edge-cases.txt'), undefined);
});

test('one parse with the union selector is enough to detect and adapt', () => {
  const page = parsePromText(fixture('tgi.txt'), ANY_ENGINE_SELECTOR);
  assert.deepEqual(load(toPodLoad(page, 5)), adapt('tgi', 'tgi.txt', 5));
  const unknown = toPodLoad(parsePromText('up 1\n'), 5);
  assert.equal(unknown.ok, false);
});

test('a page without the queue gauges is an error, not a pod with zero load', () => {
  const result = ADAPTERS.tgi.toLoad(parsePromText(fixture('vllm-v1-two-engines.txt')), 1);
  assert.deepEqual(result, { ok: false, error: 'tgi page has no tgi_queue_size' });
  const noRunning = ADAPTERS.vllm.toLoad(parsePromText('vllm:num_requests_waiting{engine="0"} 1\n'), 1);
  assert.deepEqual(noRunning, { ok: false, error: 'vllm page has no vllm:num_requests_running' });
});

test('a minimal vLLM page leaves the optional fields out and KV unknown', () => {
  const result = load(
    ADAPTERS.vllm.toLoad(parsePromText('vllm:num_requests_waiting 0\nvllm:num_requests_running 0\n'), 1),
  );
  assert.deepEqual(result, { at: 1, engine: 'vllm', waiting: 0, running: 0, kvCache: NaN });
});

test("vLLM's prefix-cache counters: summed over engines; the interval's computed tokens are queries − hits", () => {
  const page = (queries: number, hits: number) =>
    [
      'vllm:num_requests_waiting{engine="0"} 0',
      'vllm:num_requests_running{engine="0"} 1',
      'vllm:prompt_tokens_total{engine="0"} 100',
      `vllm:prefix_cache_queries_total{engine="0"} ${queries}`,
      `vllm:prefix_cache_queries_total{engine="1"} ${queries}`,
      `vllm:prefix_cache_hits_total{engine="0"} ${hits}`,
      `vllm:prefix_cache_hits_total{engine="1"} ${hits}`,
      '',
    ].join('\n');
  const before = load(ADAPTERS.vllm.toLoad(parsePromText(page(782_548, 289_543), ADAPTERS.vllm.selector), 0));
  assert.equal(before.prefixCacheQueries, 2 * 782_548);
  assert.equal(before.prefixCacheHits, 2 * 289_543);
  assert.equal(before.kvCapacityTokens, undefined); // no cache_config_info: unknown, not 0
  const after = load(ADAPTERS.vllm.toLoad(parsePromText(page(783_548, 290_343), ADAPTERS.vllm.selector), 1000));
  assert.equal(intervalDelta(before, after).computedPromptTokens, 2 * (1000 - 800));
});

test("SGLang's cache_hit_rate and max_total_num_tokens: the interval's computed tokens are prompt × (1 − rate)", () => {
  const page = (prompt: number, rate: number) =>
    [
      'sglang:num_queue_reqs{tp_rank="0"} 0',
      'sglang:num_running_reqs{tp_rank="0"} 1',
      `sglang:prompt_tokens_total{tp_rank="0"} ${prompt}`,
      `sglang:cache_hit_rate{tp_rank="0"} ${rate}`,
      `sglang:cache_hit_rate{tp_rank="1"} ${rate}`,
      'sglang:max_total_num_tokens{tp_rank="0"} 131072',
      'sglang:max_total_num_tokens{tp_rank="1"} 131072',
      '',
    ].join('\n');
  const before = load(ADAPTERS.sglang.toLoad(parsePromText(page(1000, 0.25), ADAPTERS.sglang.selector), 0));
  assert.equal(before.prefixCacheHitRate, 0.25);
  assert.equal(before.kvCapacityTokens, 131_072); // tensor-parallel ranks share one pool
  const after = load(ADAPTERS.sglang.toLoad(parsePromText(page(3000, 0.75), ADAPTERS.sglang.selector), 1000));
  assert.equal(intervalDelta(before, after).computedPromptTokens, 2000 * 0.25);
  const outOfRange = load(ADAPTERS.sglang.toLoad(parsePromText(page(3000, 1.5), ADAPTERS.sglang.selector), 1000));
  assert.equal(outOfRange.prefixCacheHitRate, undefined);
});
