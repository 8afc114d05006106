// The bench's stand-in for the Gateway API Inference Extension's default profile: its prefix index
// (blocks, LRU bound from the pod's KV blocks, greedy match) and its scorers, weights and picker.
// The routing comparison is only as honest as this baseline.

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { GIE_REFRESH_MS, GiePrefixIndex, gieBlockHashes, gieProfile } from '../bench/routing/gie.ts';
import type { BenchPod, StrategyContext } from '../bench/routing/strategies.ts';
import type { PodLoad } from '../agent/types.ts';

const BLOCK = 64; // 16 tokens × 4 characters

describe('GIE prefix blocks', () => {
  test('full blocks then the trailing partial block; nothing below one block; cut at 256 blocks', () => {
    assert.equal(gieBlockHashes('x'.repeat(BLOCK - 1)).length, 0);
    assert.equal(gieBlockHashes('x'.repeat(BLOCK)).length, 1);
    const text = 'abcdefgh'.repeat(40); // 320 characters: 5 full blocks
    assert.equal(gieBlockHashes(text).length, 5);
    const partial = gieBlockHashes(text + 'tail');
    assert.equal(partial.length, 6);
    assert.deepEqual(partial.slice(0, 5), gieBlockHashes(text));
    assert.notEqual(partial[5], gieBlockHashes(text + 'tall')[5]);
    assert.equal(gieBlockHashes('y'.repeat(BLOCK * 300 + 10)).length, 256);
  });
});

describe('GIE prefix index', () => {
  test('a pod scores the blocks it holds of the leading run any pod holds', () => {
    const index = new GiePrefixIndex();
    const a = gieBlockHashes('a'.repeat(BLOCK * 6));
    index.add('p1', a.slice(0, 4), 100);
    index.add('p2', a.slice(0, 2), 100);
    assert.deepEqual(
      index.match(a),
      new Map([
        ['p1', 4],
        ['p2', 2],
      ]),
    );
    assert.deepEqual(index.match(gieBlockHashes('b'.repeat(BLOCK * 3))), new Map());
  });

  test("its LRU holds as many blocks as the pod reports, and forgets a prompt's first blocks first", () => {
    const index = new GiePrefixIndex();
    const first = gieBlockHashes('c'.repeat(BLOCK * 3));
    const second = gieBlockHashes('d'.repeat(BLOCK * 2));
    index.add('p1', first, 4);
    index.add('p1', second, 4);
    // 5 blocks into 4 slots: the first prompt's first block went, so nothing of it matches.
    assert.deepEqual(index.match(first), new Map());
    assert.deepEqual(index.match(second), new Map([['p1', 2]]));
  });
});

function pod(index: number, load: Partial<PodLoad>): BenchPod {
  return {
    index,
    pod: { uid: `b/pod-${index}`, name: `pod-${index}`, namespace: 'b', node: 'n', address: 'sim', models: ['m'] },
    lastLoad: { at: 0, engine: 'vllm', waiting: 0, running: 0, kvCache: 0, kvCapacityTokens: 65_536, ...load },
  } as BenchPod;
}

function context(pods: BenchPod[]): StrategyContext {
  let r = 0;
  return {
    pods,
    now: () => 0,
    rand: () => (r = (r + 0.37) % 1),
    sloMs: 1000,
    scrapeIntervalMs: 100,
    oracleModel: { base: 0, perQueued: 0, perRunning: 0, perKPromptTokens: 0 },
  };
}

describe('GIE default profile', () => {
  const tokens = Array.from({ length: 640 }, (_, i) => 1000 + i);
  const arrival = { at: 0, promptTokens: tokens.length, maxTokens: 10, tokens };

  test('reads metrics every 50 ms and sends a repeated prompt back to the pod it chose', () => {
    const strategy = gieProfile(true)(context([pod(0, {}), pod(1, {}), pod(2, {})]));
    assert.equal(strategy.scrapeIntervalMs, GIE_REFRESH_MS);
    const first = strategy.choose(arrival).pod;
    for (let i = 0; i < 5; i++) assert.equal(strategy.choose(arrival).pod, first);
  });

  test('weights 2, 2, 3: the holder keeps the prompt against the longest queue, loses it when its KV is also full', () => {
    const pods = [pod(0, {}), pod(1, {})];
    const strategy = gieProfile(true)(context(pods));
    const holder = strategy.choose(arrival).pod;
    const other = 1 - holder;
    // Holder: prefix 3 + queue 0 + KV 2 = 5 against 0 + 2 + 2 = 4.
    pods[holder].lastLoad = { ...pods[holder].lastLoad!, waiting: 9 };
    assert.equal(strategy.choose(arrival).pod, holder);
    // Holder: 3 + 0 + 2 · 0.4 = 3.8 against 4.
    pods[holder].lastLoad = { ...pods[holder].lastLoad!, waiting: 9, kvCache: 0.6 };
    assert.equal(strategy.choose(arrival).pod, other);
  });

  test('without the prefix scorer a repeated prompt goes by queue and KV alone', () => {
    const pods = [pod(0, { waiting: 3 }), pod(1, { waiting: 1, kvCache: 0.5 }), pod(2, { waiting: 1, kvCache: 0.2 })];
    const strategy = gieProfile(false)(context(pods));
    for (let i = 0; i < 3; i++) assert.equal(strategy.choose(arrival).pod, 2);
  });
});
