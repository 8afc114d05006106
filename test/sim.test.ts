// The model-server simulator: vLLM's wire format, behaviour under load, faults, virtual time.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { startSim, type SimServer } from '../shared/sim/server.ts';
import { SimEngine, type SimEngineOptions } from '../shared/sim/engine.ts';
import { VirtualClock } from '../shared/sim/clock.ts';
import { waitFor } from './helpers/wait.ts';

// Wire-format tests don't need realistic speed: a fast GPU keeps them quick.
const FAST = { stepBaseMs: 1, decodeMsPerSeq: 0.1, prefillMsPerToken: 0.005 };
const MODEL = 'llama-3-8b';

function post(sim: SimServer, path: string, body: unknown, signal?: AbortSignal): Promise<Response> {
  return fetch(sim.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal,
  });
}

const chat = (extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  messages: [{ role: 'user', content: 'Say something about routing.' }],
  ...extra,
});

/** Splits an SSE body into its `data:` payloads, checking the framing on the way. */
function sseData(text: string): string[] {
  assert.ok(text.endsWith('\n\n'), 'every frame ends with a blank line');
  const frames = text.slice(0, -2).split('\n\n');
  return frames.map((frame) => {
    assert.match(frame, /^data: /);
    return frame.slice('data: '.length);
  });
}

describe('wire format (vLLM OpenAI-compatible)', () => {
  let sim: SimServer;
  before(async () => {
    sim = await startSim({ seed: 7, latency: FAST, name: 'pod-a' });
  });
  after(() => sim.close());

  test('a non-streamed chat completion has vLLM shape and honours max_tokens', async () => {
    const res = await post(sim, '/v1/chat/completions', chat({ max_tokens: 5 }));
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
    assert.equal(res.headers.get('x-sim-pod'), 'pod-a');
    const body = await res.json();
    assert.match(body.id, /^chatcmpl-[0-9a-f]{32}$/);
    assert.equal(body.object, 'chat.completion');
    assert.equal(body.model, MODEL);
    assert.ok(Number.isInteger(body.created) && body.created > 1.6e9);
    assert.equal(body.choices.length, 1);
    const [choice] = body.choices;
    assert.equal(choice.index, 0);
    assert.equal(choice.message.role, 'assistant');
    assert.equal(typeof choice.message.content, 'string');
    assert.equal(choice.message.content.split(' ').length, 5, 'one word per token');
    assert.equal(choice.finish_reason, 'length');
    assert.equal(choice.logprobs, null);
    // "Say something about routing." is 28 characters: about 7 tokens.
    assert.deepEqual(
      { ...body.usage },
      { prompt_tokens: 7, completion_tokens: 5, total_tokens: 12, prompt_tokens_details: null },
    );
  });

  test('max_completion_tokens counts like max_tokens', async () => {
    const body = await (await post(sim, '/v1/chat/completions', chat({ max_completion_tokens: 3 }))).json();
    assert.equal(body.usage.completion_tokens, 3);
    assert.equal(body.choices[0].finish_reason, 'length');
  });

  test('a chat stream sends a role chunk, one chunk per token, finish_reason last, then [DONE]', async () => {
    const res = await post(sim, '/v1/chat/completions', chat({ max_tokens: 4, stream: true }));
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
    const data = sseData(await res.text());
    assert.equal(data.at(-1), '[DONE]');
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
    assert.equal(chunks.length, 1 + 4);
    const ids = new Set(chunks.map((c) => c.id));
    assert.equal(ids.size, 1, 'one id for the whole stream');
    for (const c of chunks) {
      assert.equal(c.object, 'chat.completion.chunk');
      assert.equal(c.model, MODEL);
      assert.ok(!('usage' in c), 'no usage key unless include_usage');
      assert.equal(c.choices[0].logprobs, null);
    }
    assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
    assert.deepEqual(
      chunks.map((c) => c.choices[0].finish_reason),
      [null, null, null, null, 'length'],
    );
    assert.ok(chunks.slice(1).every((c) => typeof c.choices[0].delta.content === 'string'));
  });

  test('include_usage adds a last chunk with no choices; the others carry "usage": null', async () => {
    const res = await post(
      sim,
      '/v1/chat/completions',
      chat({ max_tokens: 3, stream: true, stream_options: { include_usage: true } }),
    );
    const data = sseData(await res.text());
    assert.equal(data.at(-1), '[DONE]');
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assert.deepEqual(
      { ...last.usage },
      { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10, prompt_tokens_details: null },
    );
    for (const c of chunks.slice(0, -1)) assert.equal(c.usage, null);
  });

  test('stream_options without stream is a 400', async () => {
    const res = await post(sim, '/v1/chat/completions', chat({ stream_options: { include_usage: true } }));
    assert.equal(res.status, 400);
  });

  test('completions, streamed and not', async () => {
    const plain = await (
      await post(sim, '/v1/completions', { model: MODEL, prompt: 'Once upon a time', max_tokens: 6 })
    ).json();
    assert.match(plain.id, /^cmpl-/);
    assert.equal(plain.object, 'text_completion');
    assert.equal(plain.choices[0].text.split(' ').filter(Boolean).length, 6);
    assert.equal(plain.choices[0].finish_reason, 'length');
    assert.equal(plain.usage.prompt_tokens, 4);

    const res = await post(sim, '/v1/completions', {
      model: MODEL,
      prompt: 'Once upon a time',
      max_tokens: 2,
      stream: true,
      stream_options: { include_usage: true },
    });
    const data = sseData(await res.text());
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
    assert.equal(chunks.length, 2 + 1);
    assert.ok(chunks.every((c) => c.object === 'text_completion'));
    assert.deepEqual(
      chunks.map((c) => c.choices[0]?.finish_reason),
      [null, 'length', undefined],
    );
    assert.equal(chunks[2].usage.completion_tokens, 2);
  });

  test('without max_tokens the length is sampled and the request ends with "stop"', async () => {
    const body = await (await post(sim, '/v1/chat/completions', chat())).json();
    assert.equal(body.choices[0].finish_reason, 'stop');
    assert.ok(body.usage.completion_tokens >= 1);
  });

  test('embeddings: one unit vector per input, the same for the same text', async () => {
    const res = await post(sim, '/v1/embeddings', { model: MODEL, input: ['alpha', 'beta', 'alpha'] });
    assert.equal(res.status, 200);
    const body = await res.json();
    assert.equal(body.object, 'list');
    assert.equal(body.data.length, 3);
    body.data.forEach((d: { index: number; object: string; embedding: number[] }, i: number) => {
      assert.equal(d.index, i);
      assert.equal(d.object, 'embedding');
      assert.equal(d.embedding.length, 32);
      assert.ok(Math.abs(Math.hypot(...d.embedding) - 1) < 1e-9);
    });
    assert.deepEqual(body.data[0].embedding, body.data[2].embedding);
    assert.notDeepEqual(body.data[0].embedding, body.data[1].embedding);
    assert.equal(body.usage.prompt_tokens, 2 + 1 + 2); // ≈ 4 characters a token, per input
    const single = await (await post(sim, '/v1/embeddings', { model: MODEL, input: 'alpha' })).json();
    assert.deepEqual(single.data[0].embedding, body.data[0].embedding);
  });

  test('GET /v1/models lists the served models in vLLM shape; /health is 200 and empty', async () => {
    const body = await (await fetch(sim.url + '/v1/models')).json();
    assert.equal(body.object, 'list');
    assert.equal(body.data.length, 1);
    const [m] = body.data;
    assert.equal(m.id, MODEL);
    assert.equal(m.object, 'model');
    assert.equal(m.owned_by, 'vllm');
    assert.equal(m.root, MODEL);
    assert.equal(m.parent, null);
    assert.equal(m.max_model_len, 8192);
    assert.ok(Number.isInteger(m.created));

    const health = await fetch(sim.url + '/health');
    assert.equal(health.status, 200);
    assert.equal(await health.text(), '');
  });

  test('bad requests get vLLM error bodies with the right status', async () => {
    const cases: [unknown, number, string | null][] = [
      ['{not json', 400, null],
      [{ messages: [{ role: 'user', content: 'x' }] }, 400, 'model'],
      [chat({ model: 'gpt-nope' }), 404, 'model'],
      [chat({ messages: [] }), 400, 'messages'],
      [chat({ max_tokens: 0 }), 400, 'max_tokens'],
      [chat({ max_tokens: 9000 }), 400, null], // beyond max_model_len
    ];
    for (const [body, status, param] of cases) {
      const res = await post(sim, '/v1/chat/completions', body);
      assert.equal(res.status, status, JSON.stringify(body));
      const err = (await res.json()).error;
      assert.equal(typeof err.message, 'string');
      assert.equal(err.code, status);
      assert.equal(err.type, status === 404 ? 'NotFoundError' : 'BadRequestError');
      assert.equal(err.param, param);
    }
    assert.equal((await fetch(sim.url + '/v1/nothing')).status, 404);
    assert.equal((await fetch(sim.url + '/v1/chat/completions')).status, 405);
  });
});

describe('behaviour under load', () => {
  test('TTFT grows with the queue: later requests wait for a slot', async () => {
    const sim = await startSim({ maxSeqs: 2, seed: 3 });
    try {
      const ttfts = await Promise.all(
        Array.from({ length: 8 }, async () => {
          const start = performance.now();
          const res = await post(sim, '/v1/chat/completions', chat({ max_tokens: 10, stream: true }));
          const reader = res.body!.getReader();
          await reader.read(); // the first frame: it only leaves once the first token exists
          const ttft = performance.now() - start;
          while (!(await reader.read()).done);
          return ttft;
        }),
      );
      ttfts.sort((a, b) => a - b);
      const first = (ttfts[0] + ttfts[1]) / 2;
      const last = (ttfts[6] + ttfts[7]) / 2;
      // 8 requests through 2 slots: the last pair waits for three waves of 10 tokens each.
      assert.ok(last > 3 * first, `first ${first.toFixed(1)} ms, last ${last.toFixed(1)} ms`);
      const snap = sim.engine.snapshot();
      assert.equal(snap.histograms.ttft.count, 8);
      assert.ok(snap.histograms.queue.sum > 0);
    } finally {
      await sim.close();
    }
  });

  test('a speed 0.5 pod is slower than a speed 1 pod under the same load', async () => {
    const [fast, slow] = await Promise.all([startSim({ speed: 1, seed: 5 }), startSim({ speed: 0.5, seed: 5 })]);
    const load = async (sim: SimServer) => {
      const start = performance.now();
      await Promise.all(
        Array.from({ length: 4 }, async () =>
          (await post(sim, '/v1/chat/completions', chat({ max_tokens: 15 }))).json(),
        ),
      );
      return performance.now() - start;
    };
    try {
      const [fastMs, slowMs] = await Promise.all([load(fast), load(slow)]);
      assert.ok(slowMs > 1.3 * fastMs, `fast ${fastMs.toFixed(0)} ms, slow ${slowMs.toFixed(0)} ms`);
    } finally {
      await Promise.all([fast.close(), slow.close()]);
    }
  });

  test('a client that leaves mid-stream frees its slot and generation stops', async () => {
    const sim = await startSim({ seed: 2 });
    try {
      const ac = new AbortController();
      const res = await post(sim, '/v1/chat/completions', chat({ max_tokens: 5000, stream: true }), ac.signal);
      const reader = res.body!.getReader();
      await reader.read();
      assert.equal(sim.engine.snapshot().running, 1);
      ac.abort();
      await waitFor(() => sim.engine.snapshot().running === 0, 1000, 'the aborted request to finish');
      const snap = sim.engine.snapshot();
      assert.equal(snap.counters.finished.abort, 1);
      assert.equal(snap.kvCache, 0);
      const generated = snap.counters.generationTokens;
      await sleep(100);
      assert.equal(sim.engine.snapshot().counters.generationTokens, generated, 'no tokens after the abort');
    } finally {
      await sim.close();
    }
  });

  test('a non-streamed request whose client leaves is aborted too', async () => {
    const sim = await startSim({ seed: 2 });
    try {
      const ac = new AbortController();
      const pending = post(sim, '/v1/chat/completions', chat({ max_tokens: 5000 }), ac.signal);
      await waitFor(() => sim.engine.snapshot().running === 1, 3000, 'the request to start');
      ac.abort();
      await assert.rejects(pending);
      await waitFor(() => sim.engine.snapshot().running === 0, 1000, 'the aborted request to finish');
      assert.equal(sim.engine.snapshot().counters.finished.abort, 1);
    } finally {
      await sim.close();
    }
  });

  test('a full queue answers 429 with an OpenAI error body', async () => {
    const sim = await startSim({ maxSeqs: 1, maxQueue: 1, seed: 4 });
    const ac = new AbortController();
    try {
      // Stream headers leave as soon as the engine accepts: both are in once fetch resolves.
      await post(sim, '/v1/chat/completions', chat({ max_tokens: 1000, stream: true }), ac.signal);
      await post(sim, '/v1/chat/completions', chat({ max_tokens: 1000, stream: true }), ac.signal);
      const snap = sim.engine.snapshot();
      assert.deepEqual([snap.running, snap.waiting], [1, 1]);
      const res = await post(sim, '/v1/chat/completions', chat({ max_tokens: 5 }));
      assert.equal(res.status, 429);
      const body = await res.json();
      assert.deepEqual(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type']);
      assert.equal(body.error.code, 429);
      assert.equal(body.error.type, 'TooManyRequestsError');
      assert.equal(sim.engine.snapshot().counters.rejected, 1);
    } finally {
      ac.abort();
      await sim.close();
    }
  });
});

describe('fault injection', () => {
  let sim: SimServer;
  before(async () => {
    sim = await startSim({ seed: 9, latency: FAST });
  });
  after(() => sim.close());

  test('refuse-before-headers resets the connection, for as many requests as asked', async () => {
    sim.setFault({ kind: 'refuse-before-headers', times: 1 });
    await assert.rejects(post(sim, '/v1/chat/completions', chat({ max_tokens: 2 })));
    const res = await post(sim, '/v1/chat/completions', chat({ max_tokens: 2 }));
    assert.equal(res.status, 200);
    await res.json();
  });

  test('status answers with that status and a vLLM error body until cleared', async () => {
    sim.setFault({ kind: 'status', status: 503 });
    for (let i = 0; i < 2; i++) {
      const res = await post(sim, '/v1/completions', { model: MODEL, prompt: 'x' });
      assert.equal(res.status, 503);
      assert.equal((await res.json()).error.type, 'ServiceUnavailableError');
    }
    sim.setFault(undefined);
    assert.equal((await post(sim, '/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 1 })).status, 200);
  });

  test('reset-after-first-token breaks the stream after the first token and aborts the sequence', async () => {
    sim.setFault({ kind: 'reset-after-first-token', times: 1 });
    const aborted = sim.engine.snapshot().counters.finished.abort;
    const res = await post(sim, '/v1/chat/completions', chat({ max_tokens: 50, stream: true }));
    assert.equal(res.status, 200);
    let received = '';
    const decoder = new TextDecoder();
    await assert.rejects(async () => {
      for await (const chunk of res.body!) received += decoder.decode(chunk as Uint8Array);
    });
    assert.match(received, /"content":"[^"]+"/, 'the first token arrived');
    assert.ok(!received.includes('[DONE]'));
    await waitFor(() => sim.engine.snapshot().counters.finished.abort === aborted + 1, 3000, 'the abort to be counted');
    assert.equal(sim.engine.snapshot().running, 0);
  });

  test('reset-after-headers answers 200 and then drops the stream before any token', async () => {
    sim.setFault({ kind: 'reset-after-headers', times: 1 });
    const aborted = sim.engine.snapshot().counters.finished.abort;
    const res = await post(sim, '/v1/chat/completions', chat({ max_tokens: 50, stream: true }));
    assert.equal(res.status, 200);
    await assert.rejects(res.text());
    await waitFor(() => sim.engine.snapshot().counters.finished.abort === aborted + 1, 3000, 'the abort to be counted');
  });

  test('stall-before-headers never answers', async () => {
    sim.setFault({ kind: 'stall-before-headers', times: 1 });
    await assert.rejects(post(sim, '/v1/chat/completions', chat(), AbortSignal.timeout(150)));
  });

  test('an unhealthy pod answers /health with 503', async () => {
    sim.setHealthy(false);
    assert.equal((await fetch(sim.url + '/health')).status, 503);
    sim.setHealthy(true);
    assert.equal((await fetch(sim.url + '/health')).status, 200);
  });
});

describe('virtual time', () => {
  /** A fixed arrival schedule through one pod; returns what happened, in order. */
  function scenario(seed: number, opts: SimEngineOptions = {}, arrivals = [0, 5, 10, 40, 41, 100, 250, 251, 252, 600]) {
    const clock = new VirtualClock();
    const engine = new SimEngine({ maxSeqs: 4, seed, ...opts }, clock);
    const log: string[] = [];
    const ttft: number[] = [];
    arrivals.forEach((t, i) => {
      clock.set(t);
      engine.advanceTo(t);
      const res = engine.submit(
        { promptTokens: 200 + 50 * i, maxTokens: i % 3 === 0 ? undefined : 30 },
        {
          onToken: (at, n) => {
            if (n === 1) {
              ttft[i] = at - t;
              log.push(`${i} first ${at}`);
            }
          },
          onDone: (at, o) => log.push(`${i} done ${at} ${o.finishReason} ${o.outputTokens}`),
        },
      );
      assert.ok(res.accepted);
    });
    const end = engine.runUntilIdle();
    return { log, ttft, end, engine };
  }

  test('is deterministic for a fixed seed, and the seed matters', () => {
    const a = scenario(42);
    const b = scenario(42);
    assert.deepEqual(a.log, b.log);
    assert.equal(a.log.length, 20);
    assert.notDeepEqual(scenario(43).log, a.log);
  });

  test('speed 0.5 doubles every duration exactly', () => {
    const burst = Array.from({ length: 10 }, () => 0);
    const fast = scenario(8, { speed: 1 }, burst);
    const slow = scenario(8, { speed: 0.5 }, burst);
    assert.equal(slow.end, 2 * fast.end);
    assert.deepEqual(
      slow.ttft,
      fast.ttft.map((t) => 2 * t),
    );
  });

  test('TTFT grows with the queue, and KV use follows the tokens held', () => {
    const clock = new VirtualClock();
    const engine = new SimEngine({ maxSeqs: 2, seed: 1, latency: { jitterFrac: 0 } }, clock);
    const ttft: number[] = [];
    for (let i = 0; i < 6; i++) {
      engine.submit({ promptTokens: 512, maxTokens: 64 }, { onToken: (at, n) => void (n === 1 && ttft.push(at)) });
    }
    const busy = engine.snapshot();
    assert.deepEqual([busy.running, busy.waiting], [1, 5]); // the first step started before the rest arrived
    engine.advanceTo(engine.nextEventTime()!);
    const mid = engine.snapshot();
    assert.deepEqual([mid.running, mid.waiting], [2, 4]);
    // 512 + 1 tokens for the first request, the second's whole prompt: 32 + 1 + 32 blocks of 16.
    assert.equal(mid.kvUsedTokens, (33 + 32) * 16);
    assert.equal(mid.kvCache, (33 + 32) / (65_536 / 16));
    engine.runUntilIdle();
    for (let i = 2; i < 6; i += 2) assert.ok(ttft[i] > ttft[i - 2] + 64 * 10, `wave ${i / 2} waited`);
    const done = engine.snapshot();
    assert.equal(done.kvCache, 0);
    assert.equal(done.counters.finished.length, 6);
    assert.equal(done.counters.generationTokens, 6 * 64);
    assert.equal(done.counters.promptTokens, 6 * 512);
  });

  test('a small KV cache preempts and recomputes, and every request still completes', () => {
    const clock = new VirtualClock();
    const engine = new SimEngine({ maxSeqs: 8, kvCapacityTokens: 4096, seed: 3 }, clock);
    const outcomes: string[] = [];
    let peak = 0;
    for (let i = 0; i < 8; i++) {
      engine.submit(
        { promptTokens: 1000, maxTokens: 200 },
        {
          onToken: () => void (peak = Math.max(peak, engine.snapshot().kvCache)),
          onDone: (_at, o) => outcomes.push(`${o.finishReason}:${o.outputTokens}`),
        },
      );
    }
    engine.runUntilIdle();
    const snap = engine.snapshot();
    assert.ok(snap.counters.preemptions > 0);
    assert.ok(peak <= 1 && peak > 0.9, `peak ${peak}`);
    assert.deepEqual(outcomes, Array(8).fill('length:200'));
    assert.equal(snap.kvCache, 0);
  });

  test('an abort frees the slot at once; the waiting request gets it at the next step', () => {
    const clock = new VirtualClock();
    const engine = new SimEngine({ maxSeqs: 1, seed: 1 }, clock);
    const first = engine.submit({ promptTokens: 100, maxTokens: 1000 });
    let secondStarted = false;
    engine.submit({ promptTokens: 100, maxTokens: 5 }, { onToken: () => void (secondStarted = true) });
    engine.advanceTo(500);
    assert.ok(first.accepted);
    first.seq.abort();
    const snap = engine.snapshot();
    assert.deepEqual([snap.running, snap.waiting, snap.counters.finished.abort], [0, 1, 1]);
    engine.runUntilIdle();
    assert.ok(secondStarted);
    assert.equal(engine.snapshot().counters.finished.length, 1);
  });

  test('callbacks may submit more work while the engine advances', () => {
    const clock = new VirtualClock();
    const engine = new SimEngine({ maxSeqs: 2, seed: 1 }, clock);
    let chained = 0;
    const next = () => {
      if (chained++ < 5) engine.submit({ promptTokens: 10, maxTokens: 3 }, { onDone: next });
    };
    next();
    engine.runUntilIdle();
    assert.equal(engine.snapshot().counters.finished.length, 5);
  });
});
