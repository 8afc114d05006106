import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import {
  createOpenAIProvider,
  lastEventEnd,
  openAIUrl,
  relaySse,
  upstreamErrorResponse,
} from '../agent/providers/openai.ts';
import { ProviderError, type ClosableProvider } from '../agent/providers/upstream.ts';
import type { Provider, ProviderSettings } from '../agent/providers/types.ts';
import type { RequestKind } from '../agent/types.ts';
import { refusedPort, startOpenAIStandin, type OpenAIStandin } from './fixtures/openai-provider.ts';

const SECRET = 'sk-test-4f9c2b7e1d0a-SECRET';
const env = { PROVIDER_KEY: SECRET };

function settings(over: Partial<ProviderSettings> = {}): ProviderSettings {
  return {
    name: 'databricks',
    kind: 'openai',
    models: { 'llama-3-8b': 'databricks-meta-llama-3-1-8b-instruct' },
    apiKey: { env: 'PROVIDER_KEY' },
    timeoutMs: 2_000,
    ...over,
  };
}

function call(body: Record<string, unknown>, kind: RequestKind = 'chat', signal = new AbortController().signal) {
  return { kind, model: 'llama-3-8b', body: { model: 'llama-3-8b', ...body }, signal };
}

const chatBody = { messages: [{ role: 'user', content: 'hi' }] };

/** The official client, talking to our adapter's Responses through a custom fetch. */
function clientFor(provider: Provider): OpenAI {
  return new OpenAI({
    apiKey: 'not-used',
    baseURL: 'http://kinference.invalid/v1',
    maxRetries: 0,
    fetch: async (url, init) => {
      const path = new URL(String(url)).pathname;
      const kind: RequestKind = path.endsWith('/chat/completions')
        ? 'chat'
        : path.endsWith('/completions')
          ? 'completions'
          : 'embeddings';
      const body = JSON.parse(String(init?.body)) as Record<string, unknown>;
      return provider.send({
        kind,
        model: String(body.model),
        body,
        signal: init?.signal ?? new AbortController().signal,
      });
    },
  });
}

/** SSE text → the data payloads, in order. */
function sseData(text: string): string[] {
  return text
    .split(/\n\n/)
    .filter((e) => e.trim() !== '')
    .map((e) => {
      assert.match(e, /^data: /, `not an SSE data event: ${e}`);
      return e.slice(6);
    });
}

describe('OpenAI-compatible provider', () => {
  let standin: OpenAIStandin;
  let provider: ClosableProvider;

  before(async () => {
    standin = await startOpenAIStandin({ apiKey: SECRET });
    provider = createOpenAIProvider(settings({ endpoint: standin.url }), { env });
  });
  after(async () => {
    await provider.close();
    await standin.close();
  });
  beforeEach(() => {
    standin.requests.length = 0;
    standin.fault = undefined;
  });

  test('sends chat to {endpoint}/chat/completions with the provider model id and a bearer token', async () => {
    const completion = await clientFor(provider).chat.completions.create({
      model: 'llama-3-8b',
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(completion.choices[0].message.content, 'Hello from the stand-in');
    const [req] = standin.requests;
    assert.equal(req.path, '/v1/chat/completions');
    assert.equal(req.body.model, 'databricks-meta-llama-3-1-8b-instruct');
    assert.equal(req.headers.authorization, `Bearer ${SECRET}`);
    // Decision: `model` in answers names what served the request; it is not rewritten.
    assert.equal(completion.model, 'databricks-meta-llama-3-1-8b-instruct');
  });

  test('relays a chat stream that the official client reads, usage chunk included', async () => {
    const stream = await clientFor(provider).chat.completions.create({
      model: 'llama-3-8b',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(text, 'Hello from the stand-in');
    assert.equal(finish, 'stop');
    assert.deepEqual(usage, { prompt_tokens: 5, completion_tokens: 4, total_tokens: 9 });
    assert.deepEqual(standin.requests[0].body.stream_options, { include_usage: true });
    assert.equal(standin.requests[0].headers.accept, 'text/event-stream');
  });

  test('routes completions and embeddings to their own paths', async () => {
    const client = clientFor(provider);
    const completion = await client.completions.create({ model: 'llama-3-8b', prompt: 'Once' });
    assert.equal(completion.choices[0].text, 'Hello from the stand-in');
    const embeddings = await client.embeddings.create({ model: 'llama-3-8b', input: ['a', 'b'] });
    assert.equal(embeddings.data.length, 2);
    assert.deepEqual(
      standin.requests.map((r) => r.path),
      ['/v1/completions', '/v1/embeddings'],
    );
    assert.ok(standin.requests.every((r) => r.body.model === 'databricks-meta-llama-3-1-8b-instruct'));
  });

  test('streams completions too', async () => {
    const res = await provider.send(call({ prompt: 'Once', stream: true }, 'completions'));
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
    const data = sseData(await res.text());
    assert.equal(data.at(-1), '[DONE]');
    assert.equal(
      data
        .slice(0, -1)
        .map((d) => (JSON.parse(d) as { choices: Array<{ text: string }> }).choices[0].text)
        .join(''),
      'Hello from the stand-in',
    );
  });

  test('passes an OpenAI-shaped upstream error through with its status', async () => {
    standin.fault = {
      kind: 'status',
      status: 400,
      body: JSON.stringify({
        error: {
          message: 'max_tokens is too large',
          type: 'invalid_request_error',
          param: 'max_tokens',
          code: 'bad_max',
        },
      }),
    };
    const res = await provider.send(call(chatBody));
    assert.equal(res.status, 400);
    assert.deepEqual(await res.json(), {
      error: {
        message: 'max_tokens is too large',
        type: 'invalid_request_error',
        param: 'max_tokens',
        code: 'bad_max',
      },
    });
  });

  test('wraps a non-OpenAI error body and keeps Retry-After on 429', async () => {
    standin.fault = { kind: 'status', status: 429, body: 'slow down', headers: { 'retry-after': '3' } };
    const res = await provider.send(call(chatBody));
    assert.equal(res.status, 429);
    assert.equal(res.headers.get('retry-after'), '3');
    const body = (await res.json()) as { error: { message: string; type: string } };
    assert.equal(body.error.type, 'rate_limit_error');
    assert.match(body.error.message, /databricks returned HTTP 429: slow down/);

    standin.fault = { kind: 'status', status: 503, body: '<html>bad gateway</html>' };
    const res503 = await provider.send(call(chatBody));
    assert.equal(res503.status, 503);
    assert.equal(((await res503.json()) as { error: { type: string } }).error.type, 'service_unavailable_error');
  });

  test('wraps a Databricks-style error', async () => {
    const res = upstreamErrorResponse(
      'dbx',
      400,
      JSON.stringify({ error_code: 'BAD_REQUEST', message: 'Input is too long.' }),
    );
    assert.equal(res.status, 400);
    assert.deepEqual(await res.json(), {
      error: { message: 'Input is too long.', type: 'invalid_request_error', param: null, code: 'BAD_REQUEST' },
    });
  });

  test('turns a malformed JSON answer into a 502', async () => {
    standin.fault = { kind: 'malformed' };
    const res = await provider.send(call(chatBody));
    assert.equal(res.status, 502);
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'upstream_malformed');
  });

  test('ends a stream that breaks midway with an error event and [DONE], dropping the half event', async () => {
    standin.fault = { kind: 'break', afterChunks: 2 };
    const res = await provider.send(call({ ...chatBody, stream: true }));
    assert.equal(res.status, 200);
    const data = sseData(await res.text());
    assert.equal(data.length, 4);
    assert.equal(
      (JSON.parse(data[1]) as { choices: Array<{ delta: { content: string } }> }).choices[0].delta.content,
      'Hello',
    );
    const err = JSON.parse(data[2]) as { error: { message: string; type: string; code: string } };
    assert.equal(err.error.code, 'upstream_stream_error');
    assert.match(err.error.message, /databricks: stream broke/);
    assert.equal(data[3], '[DONE]');
  });

  test('the official client surfaces a broken stream as an error', async () => {
    standin.fault = { kind: 'break', afterChunks: 2 };
    const stream = await clientFor(provider).chat.completions.create({
      model: 'llama-3-8b',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
    });
    await assert.rejects(async () => {
      for await (const _ of stream) {
        /* drain */
      }
    });
  });

  test('stops the upstream when the client stops reading', async () => {
    const long = await startOpenAIStandin({ reply: Array.from({ length: 2_000 }, (_, i) => `w${i}`).join(' ') });
    const p = createOpenAIProvider(settings({ endpoint: long.url, apiKey: undefined }), { env });
    try {
      const res = await p.send(call({ ...chatBody, stream: true }));
      const reader = res.body!.getReader();
      await reader.read();
      await reader.cancel();
      for (let i = 0; i < 1_000 && long.abandoned === 0; i++) await new Promise((r) => setTimeout(r, 5));
      assert.equal(long.abandoned, 1);
    } finally {
      await p.close();
      await long.close();
    }
  });

  test('rejects with a timeout when no headers come in time', async () => {
    standin.fault = { kind: 'hang' };
    const quick = createOpenAIProvider(settings({ endpoint: standin.url, timeoutMs: 150 }), { env });
    try {
      await assert.rejects(
        quick.send(call(chatBody)),
        (err: unknown) => err instanceof ProviderError && err.reason === 'timeout',
      );
    } finally {
      await quick.close();
    }
  });

  test('rejects with a connect error when nothing listens', async () => {
    const port = await refusedPort();
    const dead = createOpenAIProvider(settings({ endpoint: `http://127.0.0.1:${port}/v1` }), { env });
    try {
      await assert.rejects(
        dead.send(call(chatBody)),
        (err: unknown) => err instanceof ProviderError && err.reason === 'connect',
      );
    } finally {
      await dead.close();
    }
  });

  test('rejects as aborted when the caller aborts', async () => {
    standin.fault = { kind: 'hang' };
    const ac = new AbortController();
    const pending = provider.send(call(chatBody, 'chat', ac.signal));
    while (standin.requests.length === 0) await new Promise((r) => setTimeout(r, 2));
    ac.abort();
    await assert.rejects(pending, (err: unknown) => err instanceof ProviderError && err.reason === 'aborted');
  });

  test('never repeats the credential when the upstream quotes it back', async () => {
    const wrong = createOpenAIProvider(settings({ endpoint: standin.url }), { env: { PROVIDER_KEY: `${SECRET}-old` } });
    try {
      const res = await wrong.send(call(chatBody));
      assert.equal(res.status, 401);
      const text = await res.text();
      assert.ok(!text.includes(SECRET), text);
      assert.match(text, /rejected the configured credentials/);
    } finally {
      await wrong.close();
    }
  });

  test('reports a missing secret by reference, not value', async () => {
    const unset = createOpenAIProvider(settings({ endpoint: standin.url, apiKey: { env: 'NOT_SET_ANYWHERE' } }), {
      env: {},
    });
    await assert.rejects(
      unset.send(call(chatBody)),
      (err: unknown) =>
        err instanceof ProviderError && err.reason === 'config' && /env NOT_SET_ANYWHERE/.test(err.message),
    );
    await unset.close();
  });

  test('answers 404 for a model it does not map, and says so in supports()', async () => {
    assert.equal(provider.supports('chat', 'llama-3-8b'), true);
    assert.equal(provider.supports('embeddings', 'other'), false);
    const res = await provider.send({ ...call(chatBody), model: 'other' });
    assert.equal(res.status, 404);
    assert.equal(standin.requests.length, 0);
  });
});

describe('Azure OpenAI mode', () => {
  let standin: OpenAIStandin;
  let provider: ClosableProvider;
  before(async () => {
    standin = await startOpenAIStandin({ apiKey: SECRET });
    provider = createOpenAIProvider(
      settings({
        name: 'azure',
        endpoint: standin.origin,
        azureApiVersion: '2024-10-21',
        models: { 'llama-3-8b': 'my-deployment' },
      }),
      { env },
    );
  });
  after(async () => {
    await provider.close();
    await standin.close();
  });

  test('uses deployment paths, api-version and the api-key header', async () => {
    const completion = await clientFor(provider).chat.completions.create({
      model: 'llama-3-8b',
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(completion.choices[0].message.content, 'Hello from the stand-in');
    const [req] = standin.requests;
    assert.equal(req.path, '/openai/deployments/my-deployment/chat/completions');
    assert.deepEqual(req.query, { 'api-version': '2024-10-21' });
    assert.equal(req.headers['api-key'], SECRET);
    assert.equal(req.headers.authorization, undefined);
  });

  test('builds embeddings URLs the same way', () => {
    const url = openAIUrl(
      settings({ endpoint: 'https://res.openai.azure.com/', azureApiVersion: 'v1' }),
      'embeddings',
      'emb dep',
    );
    assert.equal(url.href, 'https://res.openai.azure.com/openai/deployments/emb%20dep/embeddings?api-version=v1');
  });
});

describe('SSE relay', () => {
  test('finds the end of the last complete event', () => {
    const enc = new TextEncoder();
    assert.equal(lastEventEnd(enc.encode('data: a\n\ndata: b')), 9);
    assert.equal(lastEventEnd(enc.encode('data: a\r\n\r\n')), 11);
    assert.equal(lastEventEnd(enc.encode('data: a\n')), 0);
  });

  test('holds a partial event until its blank line arrives', async () => {
    const enc = new TextEncoder();
    async function* upstream() {
      yield enc.encode('data: {"a":');
      yield enc.encode('1}\n\ndata: {"b"');
      yield enc.encode(':2}\n\n');
    }
    const reader = relaySse(upstream(), { onCancel: () => {}, describeBreak: () => 'x' }).getReader();
    const dec = new TextDecoder();
    const first = await reader.read();
    assert.equal(dec.decode(first.value), 'data: {"a":1}\n\n');
    const second = await reader.read();
    assert.equal(dec.decode(second.value), 'data: {"b":2}\n\n');
    assert.equal((await reader.read()).done, true);
  });

  test('an event split across chunks right at its blank line is still cut there', async () => {
    const enc = new TextEncoder();
    async function* upstream() {
      yield enc.encode('data: a\r\n');
      yield enc.encode('\r');
      yield enc.encode('\ndata: b\n');
      yield enc.encode('\n');
    }
    const reader = relaySse(upstream(), { onCancel: () => {}, describeBreak: () => 'x' }).getReader();
    const dec = new TextDecoder();
    assert.equal(dec.decode((await reader.read()).value), 'data: a\r\n\r\n');
    assert.equal(dec.decode((await reader.read()).value), 'data: b\n\n');
    assert.equal((await reader.read()).done, true);
  });

  test('a stream without blank lines is bounded: past maxEventBytes it ends with an error event and [DONE], upstream cancelled', async () => {
    const enc = new TextEncoder();
    let sent = 0;
    let cancelled = false;
    async function* upstream() {
      // 32 MB of one endless "event" in 16 KB chunks: the relay must stop long before.
      for (let i = 0; i < 2048; i++) {
        sent++;
        yield enc.encode('x'.repeat(16 * 1024));
      }
    }
    const text = await new Response(
      relaySse(upstream(), {
        maxEventBytes: 1024 * 1024,
        onCancel: () => (cancelled = true),
        describeBreak: () => 'x',
      }),
    ).text();
    assert.ok(cancelled);
    assert.ok(sent <= (1024 * 1024) / (16 * 1024) + 1, `read ${sent} chunks`);
    assert.match(
      text,
      /^data: \{"error":\{"message":"upstream event larger than 1048576 bytes".*\n\ndata: \[DONE\]\n\n$/s,
    );
  });

  test('does not add an error after [DONE] when the connection drops late', async () => {
    const enc = new TextEncoder();
    async function* upstream() {
      yield enc.encode('data: {"a":1}\n\ndata: [DONE]\n\n');
      throw new Error('socket hang up');
    }
    const text = await new Response(relaySse(upstream(), { onCancel: () => {}, describeBreak: () => 'broke' })).text();
    assert.equal(text, 'data: {"a":1}\n\ndata: [DONE]\n\n');
  });
});
