// The request path's promises: clear errors for bad input, true streaming, cancellation, retry
// before the first byte, an OpenAI error event after it, and the admin endpoints.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { chatBody, MODEL, postJson, startStack, waitFor, type Stack } from './helpers/stack.ts';

async function expectError(response: Response, status: number, param?: string) {
  assert.equal(response.status, status);
  assert.equal(response.headers.get('x-kinference-route'), 'rejected');
  const body = (await response.json()) as {
    error: { message: string; type: string; param: string | null; code: string | null };
  };
  assert.equal(typeof body.error.message, 'string');
  assert.equal(typeof body.error.type, 'string');
  if (param !== undefined) assert.equal(body.error.param, param);
  return body.error;
}

describe('bad input gets a clear OpenAI error and never a crash', () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack({ config: { limits: { maxBodyBytes: 64 * 1024 } } });
  });
  after(() => stack.close());
  const chat = () => `${stack.api}/v1/chat/completions`;

  it('400 for malformed JSON', async () => {
    const error = await expectError(await postJson(chat(), '{"model": "x", '), 400);
    assert.match(error.message, /not valid JSON/);
  });
  it('400 for a body that is not an object', async () => {
    await expectError(await postJson(chat(), '[1,2,3]'), 400);
    await expectError(await postJson(chat(), '"text"'), 400);
  });
  it('400 naming the field for missing or mistyped fields', async () => {
    await expectError(await postJson(chat(), { messages: [{ role: 'user', content: 'x' }] }), 400, 'model');
    await expectError(await postJson(chat(), { model: MODEL }), 400, 'messages');
    await expectError(
      await postJson(chat(), { model: MODEL, messages: [{ role: 'wizard', content: 'x' }] }),
      400,
      'messages[0].role',
    );
    await expectError(await postJson(chat(), chatBody('x', { stream: 'yes' })), 400, 'stream');
    await expectError(await postJson(chat(), chatBody('x', { max_tokens: -1 })), 400, 'max_tokens');
    await expectError(await postJson(`${stack.api}/v1/completions`, { model: MODEL }), 400, 'prompt');
    await expectError(await postJson(`${stack.api}/v1/embeddings`, { model: MODEL, input: 42 }), 400, 'input');
  });
  it('404 for an unknown model', async () => {
    await expectError(await postJson(chat(), chatBody('x', { model: 'gpt-nope' })), 404, 'model');
  });
  it('413 for a body over the configured limit, declared or streamed', async () => {
    const big = JSON.stringify(chatBody('x'.repeat(100 * 1024)));
    await expectError(await postJson(chat(), big), 413);
    // Chunked upload (no content-length): the limit holds while reading.
    const chunked = await request(chat(), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: Readable.from(
        (function* () {
          for (let i = 0; i < 100; i++) yield Buffer.alloc(1024, 32);
        })(),
      ),
    });
    assert.equal(chunked.statusCode, 413);
    await chunked.body.dump();
  });
  it('answers a request cut off mid-body without hanging or crashing', async () => {
    const { port } = new URL(stack.api);
    await new Promise<void>((resolve, reject) => {
      const socket = connect(Number(port), '127.0.0.1', () => {
        socket.write(
          'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"model":',
        );
        socket.end();
      });
      socket.on('close', () => resolve());
      socket.on('error', reject);
      socket.resume();
    });
    const ok = await postJson(chat(), chatBody());
    assert.equal(ok.status, 200);
    await ok.arrayBuffer();
  });
  it('404 in OpenAI shape for unknown routes', async () => {
    await expectError(await fetch(`${stack.api}/v1/unknown`), 404);
  });
});

describe('streaming, cancellation and retries', () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack({ pods: [{ maxSeqs: 4 }, { maxSeqs: 4 }] });
  });
  after(() => stack.close());

  it('relays the first chunk before the pod has finished the answer', async () => {
    const response = await request(`${stack.api}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chatBody('Tell me a story', { stream: true, max_tokens: 60 })),
    });
    const route = String(response.headers['x-kinference-route']);
    const sim = stack.sims[Number(route.split('-').at(-1))];
    const iterator = response.body[Symbol.asyncIterator]();
    const first = await iterator.next();
    assert.ok(!first.done);
    // The pod is still generating this request while we already hold its first chunk.
    assert.equal(sim.engine.snapshot().running, 1);
    let text = Buffer.from(first.value).toString();
    for (let next = await iterator.next(); !next.done; next = await iterator.next())
      text += Buffer.from(next.value).toString();
    assert.match(text, /data: \[DONE\]\n\n$/);
  });

  it('stops the work on the pod when the client disconnects', async () => {
    const controller = new AbortController();
    const response = await request(`${stack.api}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chatBody('Long answer please', { stream: true, max_tokens: 2000 })),
      signal: controller.signal,
    });
    const route = String(response.headers['x-kinference-route']);
    const sim = stack.sims[Number(route.split('-').at(-1))];
    const iterator = response.body[Symbol.asyncIterator]();
    await iterator.next();
    assert.equal(sim.engine.snapshot().running, 1);
    controller.abort();
    await waitFor(() => sim.engine.snapshot().running === 0, 3000, 'the pod to drop the aborted request');
    assert.ok(sim.engine.snapshot().counters.finished.abort >= 1);
  });

  it('retries on another pod when the first fails before its first byte', async () => {
    for (const fault of ['refuse-before-headers', 'reset-after-headers', 'status-503'] as const) {
      // A fresh pair of pods per case, so nothing learned earlier sways the choice: pod-1 holds two
      // long requests from another client, so pod-0 (idle) is the first choice, and it will fail.
      const pair = await startStack({ pods: [{ maxSeqs: 4 }, { maxSeqs: 4 }] });
      try {
        const held = Array.from({ length: 2 }, () =>
          pair.sims[1].engine.submit({ promptTokens: 50, maxTokens: 100_000 }),
        );
        await waitFor(
          async () => {
            const e = (await (await fetch(`${pair.admin}/explain?model=${MODEL}`)).json()) as {
              candidates: { pod: string; running: number }[];
            };
            return e.candidates[0]?.pod === 'local/pod-0' && e.candidates[1]?.running === 2;
          },
          10_000,
          'pod-0 to be the first choice',
        ); // generous: a loaded CI machine scrapes late
        pair.sims[0].setFault(
          fault === 'status-503' ? { kind: 'status', status: 503, times: 1 } : { kind: fault, times: 1 },
        );
        const response = await postJson(`${pair.api}/v1/chat/completions`, chatBody('x', { stream: true }));
        assert.equal(response.status, 200, fault);
        assert.equal(response.headers.get('x-kinference-route'), 'local/pod-1', fault);
        const text = await response.text();
        assert.match(text, /data: \[DONE\]/);
        assert.doesNotMatch(text, /"error"/);
        const metrics = await (await fetch(`${pair.admin}/metrics`)).text();
        assert.match(metrics, /kinference_retries_total 1\n/, `${fault}: one retry`);
        for (const h of held) if (h.accepted) h.seq.abort();
      } finally {
        await pair.close();
      }
    }
  });

  it('ends a stream that fails after the first byte with an OpenAI error event, then [DONE]', async () => {
    for (const sim of stack.sims) sim.setFault({ kind: 'reset-after-first-token', times: 1 });
    const response = await postJson(
      `${stack.api}/v1/chat/completions`,
      chatBody('x', { stream: true, max_tokens: 40 }),
    );
    assert.equal(response.status, 200);
    const text = await response.text();
    for (const sim of stack.sims) sim.setFault(undefined);
    const frames = text.trim().split('\n\n');
    assert.equal(frames.at(-1), 'data: [DONE]');
    const error = JSON.parse(frames.at(-2)!.slice('data: '.length));
    assert.equal(typeof error.error.message, 'string');
    assert.ok(frames.length >= 3, 'at least one token, the error, [DONE]');
  });

  it('502 when every pod fails before answering a non-streamed request', async () => {
    for (const sim of stack.sims) sim.setFault({ kind: 'status', status: 500 });
    const response = await postJson(`${stack.api}/v1/chat/completions`, chatBody());
    for (const sim of stack.sims) sim.setFault(undefined);
    const error = await expectError(response, 502);
    assert.match(error.message, /tried 2 pods/);
    // The failure cool-down ends and the pods serve again.
    await waitFor(async () => (await postJson(`${stack.api}/v1/chat/completions`, chatBody())).ok, 5000, 'pods back');
  });
});

describe('admin listener', () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack();
  });
  after(() => stack.close());

  it('serves health, readiness with details, Prometheus metrics and state', async () => {
    assert.equal((await fetch(`${stack.admin}/healthz`)).status, 200);
    const ready = await fetch(`${stack.admin}/readyz`);
    assert.equal(ready.status, 200);
    const detail = (await ready.json()) as { checks: Record<string, { ok: boolean }> };
    assert.equal(detail.checks.firstScrape.ok, true);
    await (await postJson(`${stack.api}/v1/chat/completions`, chatBody())).arrayBuffer();
    const metrics = await (await fetch(`${stack.admin}/metrics`)).text();
    assert.match(
      metrics,
      /kinference_requests_total\{api="chat",route="local",outcome="ok",model="llama-3-8b",policy="builtin\/default"\} 1/,
    );
    assert.match(metrics, /# TYPE kinference_upstream_ttft_seconds histogram/);
    assert.match(metrics, /kinference_pod_predicted_ttft_seconds\{pod="pod-0",where="local"\} 0\.\d+/);
    assert.match(metrics, /kinference_scrapes_total\{outcome="ok"\} \d+/);
    const state = (await (await fetch(`${stack.admin}/debug/state`)).json()) as {
      pods: { local: { pod: { name: string } }[] };
    };
    assert.deepEqual(
      state.pods.local.map((p) => p.pod.name),
      ['pod-0'],
    );
  });
});
