// The simulator's prefix cache: chained block hashes, hits and partial hits that skip prefill,
// eviction of unreferenced blocks under KV pressure, and vLLM's / SGLang's counters on /metrics.

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { SimEngine, type SimEngineOptions } from '../shared/sim/engine.ts';
import { VirtualClock } from '../shared/sim/clock.ts';
import { chainedBlockHashes, PrefixCache } from '../shared/sim/prefix-cache.ts';
import { startSim } from '../shared/sim/server.ts';
import { mulberry32 } from '../shared/sim/random.ts';

/** `n` seeded token ids: the same seed gives the same sequence. */
function tokens(seed: number, n: number): number[] {
  const rand = mulberry32(seed);
  return Array.from({ length: n }, () => Math.floor(rand() * 128_000));
}

/** Runs each request alone (the engine idles between them); returns their TTFTs. */
function runAlone(engine: SimEngine, clock: VirtualClock, prompts: number[][]): number[] {
  return prompts.map((ids) => {
    const start = engine.runUntilIdle() + 1000;
    clock.set(start);
    engine.advanceTo(start);
    let ttft = NaN;
    const res = engine.submit(
      { promptTokens: ids.length, tokens: ids, maxTokens: 4 },
      {
        onToken: (at, n) => {
          if (n === 1) ttft = at - start;
        },
      },
    );
    assert.ok(res.accepted);
    engine.runUntilIdle();
    return ttft;
  });
}

function engineWith(opts: SimEngineOptions = {}) {
  const clock = new VirtualClock();
  return { clock, engine: new SimEngine({ seed: 1, latency: { jitterFrac: 0 }, ...opts }, clock) };
}

describe('chained block hashes', () => {
  test('a block matches only with the same tokens before it; a partial last block is not hashed', () => {
    const a = tokens(1, 40);
    const h = chainedBlockHashes(a, 16);
    assert.equal(h.length, 2);
    assert.deepEqual(chainedBlockHashes(a.slice(), 16), h, 'stable for the same tokens');
    assert.deepEqual(chainedBlockHashes([...a.slice(0, 32), ...tokens(9, 30)], 16).slice(0, 2), h);
    // Same second block after a different first block: a different hash (the chain).
    const b = [...tokens(2, 16), ...a.slice(16, 32)];
    assert.notEqual(chainedBlockHashes(b, 16)[1], h[1]);
    assert.ok(h.every((x) => Number.isSafeInteger(x)));
    assert.equal(chainedBlockHashes(a, 16, 20).length, 1, 'limited to the first 20 tokens');
  });

  test('the cache evicts the least recently released unreferenced block, never a held one', () => {
    const cache = new PrefixCache();
    assert.equal(cache.acquire(1), 1);
    assert.equal(cache.acquire(2), 1);
    assert.equal(cache.acquire(2), 0, 'already held by another request');
    assert.equal(cache.release(2), 0);
    assert.equal(cache.release(1), 1);
    assert.equal(cache.release(2), 1);
    assert.deepEqual([cache.referenced, cache.evictable], [0, 2]);
    assert.equal(cache.acquire(1), 1, 'reused from the free space');
    assert.ok(cache.evictOne());
    assert.equal(cache.match([2]), 0, 'block 2 was the only evictable one');
    assert.equal(cache.match([1]), 1);
    assert.equal(cache.evictOne(), false, 'block 1 is held');
  });
});

describe('simulated prefix caching', () => {
  test('a repeated prompt skips its cached blocks: lower TTFT, hits counted in whole blocks', () => {
    const { clock, engine } = engineWith();
    const p = tokens(1, 1000);
    const [cold, warm] = runAlone(engine, clock, [p, p]);
    const c = engine.snapshot().counters;
    // At least one token is always computed: 999 → 62 whole blocks hit.
    assert.equal(c.prefixHits, 62 * 16);
    assert.equal(c.prefixQueries, 2000);
    assert.equal(c.promptTokens, 2000, 'prompt tokens still count every prompt token');
    // Cold: base + 1000 · 0.25 ms; warm: base + 8 · 0.25 ms (each stretched by a batch of 1 in 16).
    const stretch = 1 + 0.5 / 16;
    assert.ok(Math.abs(cold - (13.4 + 250 * stretch)) < 0.01, `cold ${cold}`);
    assert.ok(Math.abs(warm - (13.4 + 2 * stretch)) < 0.01, `warm ${warm}`);
  });

  test('a shared prefix is a partial hit: only the divergent tail is prefilled', () => {
    const { clock, engine } = engineWith();
    const system = tokens(7, 320);
    const [, second] = runAlone(engine, clock, [
      [...system, ...tokens(1, 100)],
      [...system, ...tokens(2, 100)],
    ]);
    assert.equal(engine.snapshot().counters.prefixHits, 320);
    assert.ok(Math.abs(second - (13.4 + 100 * 0.25 * (1 + 0.5 / 16))) < 0.01, `second ${second}`);
  });

  test("with the answer's token ids, its full blocks are cached too: the next turn hits the history", () => {
    const { clock, engine } = engineWith();
    const conversation = tokens(5, 1000);
    clock.set(10);
    engine.advanceTo(10);
    // Turn 1: 300 prompt tokens, an answer of 200 known tokens.
    assert.ok(
      engine.submit({
        promptTokens: 300,
        tokens: conversation.slice(0, 300),
        outputTokens: conversation.slice(300, 500),
        maxTokens: 200,
      }).accepted,
    );
    engine.runUntilIdle();
    // Its KV covered 300 + 199 tokens (the last answer token is never fed back): 31 full blocks.
    assert.equal(engine.snapshot().prefixCachedBlocks, 31);
    const before = engine.snapshot().counters.prefixHits;
    runAlone(engine, clock, [conversation.slice(0, 600)]);
    assert.equal(engine.snapshot().counters.prefixHits - before, 31 * 16);
  });

  test('without token ids, or with caching off, nothing is cached and nothing changes', () => {
    const off = engineWith({ prefixCaching: false });
    const p = tokens(1, 1000);
    const [a, b] = runAlone(off.engine, off.clock, [p, p]);
    assert.equal(a, b);
    assert.equal(off.engine.snapshot().counters.prefixHits, 0);
    assert.equal(off.engine.snapshot().prefixCachedBlocks, 0);
    const blind = engineWith();
    const c = blind.engine.submit({ promptTokens: 1000, maxTokens: 4 });
    assert.ok(c.accepted);
    blind.engine.runUntilIdle();
    assert.equal(blind.engine.snapshot().prefixCachedBlocks, 0);
    assert.equal(blind.engine.snapshot().counters.prefixQueries, 1000);
  });

  test('cached blocks do not count as KV usage, and running requests evict them when space is short', () => {
    // 64 blocks of KV.
    const { clock, engine } = engineWith({ kvCapacityTokens: 1024 });
    const a = tokens(1, 640); // 40 blocks
    runAlone(engine, clock, [a]);
    let s = engine.snapshot();
    assert.equal(s.kvCache, 0, 'nothing is running');
    assert.equal(s.prefixCachedBlocks, 40);
    // 600 other tokens + 4 output hold 38 of the 64 blocks: 14 of a's 40 blocks must go, the
    // last ones first, so a's first 26 survive; b leaves its 37 full prompt blocks cached.
    runAlone(engine, clock, [tokens(2, 600)]);
    s = engine.snapshot();
    assert.equal(s.prefixCachedBlocks, 26 + 37);
    const before = s.counters.prefixHits;
    runAlone(engine, clock, [a]);
    assert.equal(engine.snapshot().counters.prefixHits - before, 26 * 16);
  });

  test('requests running together share cached blocks instead of holding copies', () => {
    const { clock, engine } = engineWith();
    const p = tokens(3, 800);
    runAlone(engine, clock, [p]);
    clock.set(engine.time + 10);
    engine.advanceTo(clock.now());
    for (let i = 0; i < 3; i++) assert.ok(engine.submit({ promptTokens: p.length, tokens: p, maxTokens: 50 }).accepted);
    engine.advanceTo(clock.now() + 30);
    const s = engine.snapshot();
    assert.equal(s.running, 3);
    // 49 shared prompt blocks + for each request its last block and a few output tokens.
    const blocks = s.kvUsedTokens / s.blockSize;
    assert.ok(blocks < 49 + 3 * 3, `${blocks} blocks in use`);
    engine.runUntilIdle();
    assert.equal(engine.snapshot().kvCache, 0);
  });

  test('vLLM counters and SGLang hit rate on /metrics, from chat requests resending their history', async () => {
    for (const flavor of ['vllm', 'sglang'] as const) {
      const sim = await startSim({
        engine: flavor,
        seed: 1,
        latency: { stepBaseMs: 1, decodeMsPerSeq: 0.1, prefillMsPerToken: 0.005 },
      });
      try {
        const history = [
          { role: 'system', content: 'You are a helpful routing assistant. '.repeat(20) },
          { role: 'user', content: 'First question?' },
        ];
        const send = (messages: unknown[]) =>
          fetch(sim.url + '/v1/chat/completions', {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ model: 'llama-3-8b', messages, max_tokens: 3 }),
          }).then((r) => r.json() as Promise<{ usage: { prompt_tokens: number } }>);
        const first = await send(history);
        const second = await send([
          ...history,
          { role: 'assistant', content: 'An answer.' },
          { role: 'user', content: 'And then?' },
        ]);
        const text = await (await fetch(sim.url + '/metrics')).text();
        const cachedBlocks = Math.floor((first.usage.prompt_tokens - 1) / 16);
        if (flavor === 'vllm') {
          assert.match(text, new RegExp(`^vllm:prefix_cache_hits_total\\{[^}]*\\} ${cachedBlocks * 16}\\.0$`, 'm'));
          assert.match(text, /^vllm:prefix_cache_queries_total\{[^}]*\} \d+\.0$/m);
        } else {
          // The latest prefill batch's rate (SGLang's log_prefill_stats), here the second request alone.
          const rate = Number(/^sglang:cache_hit_rate\{[^}]*\} (\S+)$/m.exec(text)?.[1]);
          assert.ok(Math.abs(rate - (cachedBlocks * 16) / second.usage.prompt_tokens) < 1e-9, `hit rate ${rate}`);
        }
      } finally {
        await sim.close();
      }
    }
  });
});
