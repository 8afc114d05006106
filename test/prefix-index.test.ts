// The agent's approximate prefix index: stable block hashes of the rendered prompt, per-pod LRU
// bounds, ageing by the pod's computed tokens and KV capacity, and the many-candidate lookup.

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { promptBlocks, renderPrompt } from '../agent/prefix/blocks.ts';
import { PrefixIndex } from '../agent/prefix/index.ts';

const SYSTEM = 'You are a careful assistant for the finance team. Answer briefly and cite sources. '.repeat(8);

function chat(turns: string[]): Record<string, unknown> {
  return {
    model: 'm',
    messages: [
      { role: 'system', content: SYSTEM },
      ...turns.map((content, i) => ({ role: i % 2 ? 'assistant' : 'user', content })),
    ],
  };
}

const blocksOf = (body: Record<string, unknown>) => promptBlocks(renderPrompt(body));

describe('prompt blocks', () => {
  test('the same body always hashes the same; a resent history keeps its blocks as a prefix', () => {
    const turn1 = blocksOf(chat(['What is our Q3 exposure to rates?']));
    assert.deepEqual(blocksOf(chat(['What is our Q3 exposure to rates?'])), turn1);
    // Known value: a change to the hashing would silently invalidate every pod's index across a rollout.
    assert.deepEqual(promptBlocks('x'.repeat(128)), [3687425588574231, 833333116083414]);
    assert.ok(turn1.every((h) => Number.isSafeInteger(h) && h >= 0));
    const turn2 = blocksOf(chat(['What is our Q3 exposure to rates?', 'About 4% of the book.', 'And Q4?']));
    assert.ok(turn2.length > turn1.length);
    // Every full block of turn 1 before the point where turn 2 diverges is shared.
    const common = Math.floor(renderPrompt(chat(['What is our Q3 exposure to rates?'])).length / 64);
    assert.deepEqual(turn2.slice(0, common), turn1.slice(0, common));
  });

  test('a difference early in the prompt changes every later block (the chain)', () => {
    const a = promptBlocks('A' + 'x'.repeat(200));
    const b = promptBlocks('B' + 'x'.repeat(200));
    assert.equal(a.length, 3);
    for (let i = 0; i < 3; i++) assert.notEqual(a[i], b[i]);
    assert.equal(promptBlocks('short').length, 0, 'a partial block is never cached');
    assert.deepEqual(
      promptBlocks('x'.repeat(640), 64, 2),
      promptBlocks('x'.repeat(640)).slice(0, 2),
      'bounded, same hashes',
    );
  });

  test('rendering covers chat parts, tool calls, completions prompts, token ids and Responses input', () => {
    const parts = renderPrompt({
      messages: [{ role: 'user', content: [{ type: 'text', text: 'hello' }, { type: 'image_url' }] }],
    });
    assert.equal(parts, '<|user|>hello\n');
    const tool = renderPrompt({
      messages: [{ role: 'assistant', content: null, tool_calls: [{ function: { name: 'f', arguments: '{"a":1}' } }] }],
    });
    assert.equal(tool, '<|assistant|>f{"a":1}\n');
    assert.equal(renderPrompt({ prompt: 'plain' }), 'plain');
    assert.equal(renderPrompt({ prompt: [1, 2] }).length, 8, 'a token id counts as four characters');
    assert.equal(renderPrompt({ instructions: 'sys', input: 'hi' }), 'sys\nhi');
    assert.equal(renderPrompt({ messages: 'not a list' }), '');
  });
});

describe('prefix index', () => {
  const prompt = promptBlocks('p'.repeat(64 * 10));

  test('expected cached tokens are the leading blocks recorded for that pod', () => {
    const index = new PrefixIndex();
    index.record('a', prompt.slice(0, 6));
    assert.equal(index.expectedCachedTokens('a', prompt), 6 * 16);
    assert.equal(index.expectedCachedTokens('b', prompt), 0);
    assert.deepEqual([...index.cachedTokensByPod(prompt)], [['a', 96]]);
    index.record('b', prompt);
    assert.deepEqual(Object.fromEntries(index.cachedTokensByPod(prompt)), { a: 96, b: 160 });
    // A gap stops the match: only a chain from the first block counts.
    index.record('c', [prompt[0], prompt[1], prompt[3], prompt[4]]);
    assert.equal(index.expectedCachedTokens('c', prompt), 2 * 16);
    assert.equal(index.cachedTokensByPod(prompt).get('c'), 2 * 16);
  });

  test('bounded per pod: the oldest records go first, the first blocks of a prompt last', () => {
    const index = new PrefixIndex({ maxBlocksPerPod: 12 });
    const other = promptBlocks('q'.repeat(64 * 10));
    index.record('a', prompt);
    index.record('a', other);
    assert.deepEqual(index.memory(), { pods: 1, blocks: 12, distinctBlocks: 12 });
    // 8 of `prompt`'s blocks were evicted, its last ones first: its first 2 remain.
    assert.equal(index.expectedCachedTokens('a', prompt), 2 * 16);
    assert.equal(index.expectedCachedTokens('a', other), 10 * 16);
    index.forget('a');
    assert.deepEqual(index.memory(), { pods: 0, blocks: 0, distinctBlocks: 0 });
    assert.equal(index.cachedTokensByPod(other).size, 0);
  });

  test('ageing: entries lapse once the pod has computed more blocks than its KV holds', () => {
    const index = new PrefixIndex();
    index.record('a', prompt);
    index.observe('a', { capacityBlocks: 1000, computedTokens: 0 });
    assert.equal(index.expectedCachedTokens('a', prompt), 160);
    // 1,000 blocks computed since: as many as the pod holds, the oldest may still be there.
    index.observe('a', { capacityBlocks: 1000, computedTokens: 1000 * 16 });
    assert.equal(index.expectedCachedTokens('a', prompt), 160);
    // One more: the pod had to evict something, and its least recently used is this.
    index.observe('a', { capacityBlocks: 1000, computedTokens: 1001 * 16 });
    assert.equal(index.expectedCachedTokens('a', prompt), 0);
    assert.equal(index.cachedTokensByPod(prompt).size, 0);
    // A prompt sent again now is fresh.
    index.record('a', prompt);
    assert.equal(index.expectedCachedTokens('a', prompt), 160);
  });

  test('under pressure (KV full of running requests) a prefix sent moments ago is still expected cached', () => {
    // The running requests hold the very blocks they were sent with: a pod at 95% usage that has
    // computed 100 blocks since still has them (ageing by free KV alone called them evicted).
    const index = new PrefixIndex();
    index.observe('a', { capacityBlocks: 1000, computedTokens: 0 });
    index.record('a', prompt);
    // What the pod's scrape also says (vllm:kv_cache_usage_perc); the index does not age by it.
    const scrape = { capacityBlocks: 1000, computedTokens: 100 * 16, kvUsage: 0.95 };
    index.observe('a', scrape);
    assert.equal(index.expectedCachedTokens('a', prompt), 160);
    assert.equal(index.cachedTokensByPod(prompt).get('a'), 160);
  });

  test("a pod's entries are capped by its KV capacity, the least recently sent dropped first", () => {
    const index = new PrefixIndex();
    index.observe('a', { capacityBlocks: 12, computedTokens: 0 });
    const other = promptBlocks('q'.repeat(64 * 8));
    index.record('a', prompt); // 10 blocks
    index.record('a', other); // 8 more: 6 too many for a 12-block pod
    assert.equal(index.podBlocks('a'), 12);
    // `prompt`'s last 6 blocks went first: its first 4 remain, as the engine's LRU would keep them.
    assert.equal(index.expectedCachedTokens('a', prompt), 4 * 16);
    assert.equal(index.expectedCachedTokens('a', other), 8 * 16);
    // A pod that reports less KV than before is trimmed at once.
    index.observe('a', { capacityBlocks: 8, computedTokens: 0 });
    assert.equal(index.podBlocks('a'), 8);
    assert.equal(index.expectedCachedTokens('a', prompt), 0);
    assert.equal(index.memory().distinctBlocks, 8);
  });

  test('a counter that goes back (the server restarted) empties the pod', () => {
    const index = new PrefixIndex();
    index.observe('a', { capacityBlocks: 1000, computedTokens: 0 }); // first scrape: the baseline
    index.record('a', prompt);
    index.observe('a', { capacityBlocks: 1000, computedTokens: 5000 });
    assert.equal(index.expectedCachedTokens('a', prompt), 160);
    index.observe('a', { capacityBlocks: 1000, computedTokens: 10 });
    assert.equal(index.expectedCachedTokens('a', prompt), 0);
    assert.equal(index.memory().blocks, 0);
  });

  test("a pod's first scrape is the baseline: what it computed before does not age later records", () => {
    const index = new PrefixIndex();
    index.observe('a', { capacityBlocks: 100, computedTokens: 1_000_000 });
    index.record('a', prompt);
    index.observe('a', { capacityBlocks: 100, computedTokens: 1_000_000 + 50 * 16 });
    assert.equal(index.expectedCachedTokens('a', prompt), 160);
    index.observe('a', { capacityBlocks: 100, computedTokens: 1_000_000 + 101 * 16 });
    assert.equal(index.expectedCachedTokens('a', prompt), 0);
  });

  test('re-recording refreshes an entry without duplicating its holder', () => {
    const index = new PrefixIndex();
    index.record('a', prompt);
    index.record('a', prompt);
    assert.deepEqual(index.memory(), { pods: 1, blocks: 10, distinctBlocks: 10 });
    assert.throws(() => new PrefixIndex({ maxBlocksPerPod: 0 }), RangeError);
  });
});

test('the all-pods lookup agrees with asking each pod, across prefixes, shared system prompts and ageing', () => {
  const index = new PrefixIndex({ maxBlocksPerPod: 400 });
  const request = promptBlocks('r'.repeat(64 * 60));
  const system = request.slice(0, 12);
  const other = promptBlocks('o'.repeat(64 * 30));
  for (let p = 0; p < 40; p++) {
    const id = `pod-${p}`;
    index.observe(id, { capacityBlocks: 200, computedTokens: 0 });
    if (p % 3 === 0) index.record(id, system);
    if (p % 7 === 0) index.record(id, request.slice(0, 5 + p));
    if (p % 5 === 0) index.record(id, other);
    // Some pods computed enough since to lose part of it.
    if (p % 4 === 0) index.observe(id, { capacityBlocks: 200, computedTokens: 16 * (100 + 10 * p) });
  }
  const all = index.cachedTokensByPod(request);
  for (let p = 0; p < 40; p++) {
    const id = `pod-${p}`;
    assert.equal(all.get(id) ?? 0, index.expectedCachedTokens(id, request), id);
  }
  assert.ok([...all.values()].some((t) => t > system.length * 16)); // some hold more than the system prompt
});
