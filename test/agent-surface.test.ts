// The rest of the OpenAI surface: /v1/responses (through the official client) to pods and to
// providers, the model-server routes passed through by load (multipart included), per-pod API
// keys, and the request id and W3C trace context carried to pods and providers.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { IncomingHttpHeaders } from 'node:http';
import OpenAI from 'openai';
import { refusedPort, startOpenAIStandin, type OpenAIStandin } from './fixtures/openai-provider.ts';
import { chatBody, MODEL, postJson, startStack, waitFor, type Stack } from './helpers/stack.ts';

const POD_KEY = 'pod-key-5b1e';
const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

describe('OpenAI surface', () => {
  let stack: Stack;
  let provider: OpenAIStandin;
  const seen: { pod: string; path: string; headers: IncomingHttpHeaders }[] = [];
  const logLines: string[] = [];

  before(async () => {
    provider = await startOpenAIStandin({ apiKey: 'sk-provider', reply: 'Hello from the provider' });
    process.env.KINFERENCE_TEST_SURFACE_PROVIDER_KEY = 'sk-provider';
    const keyFile = join(mkdtempSync(join(tmpdir(), 'kinference-')), 'pod-key');
    writeFileSync(keyFile, `${POD_KEY}\n`);
    const refused = await refusedPort();
    const record = (pod: string) => (s: { path: string; headers: IncomingHttpHeaders }) =>
      seen.push({ pod, path: s.path, headers: s.headers });
    stack = await startStack({
      // Both pods were started with --api-key; the agent has the key, the apps do not.
      pods: [
        { apiKey: POD_KEY, onRequest: record('pod-0') },
        { apiKey: POD_KEY, onRequest: record('pod-1') },
      ],
      requestLog: (line) => logLines.push(line),
      config: {
        podCredentials: [{ namespace: 'inference', apiKey: { file: keyFile } }],
        requestLog: { sample: 1 },
        providers: [
          {
            name: 'bedrock',
            kind: 'bedrock',
            region: 'us-east-1',
            endpoint: `http://127.0.0.1:${refused}`,
            models: { [MODEL]: 'meta.llama3-1-8b-instruct-v1:0' },
            apiKey: { env: 'KINFERENCE_TEST_SURFACE_PROVIDER_KEY' },
          },
          {
            name: 'hosted',
            kind: 'openai',
            endpoint: provider.url,
            models: { [MODEL]: 'hosted-llama' },
            apiKey: { env: 'KINFERENCE_TEST_SURFACE_PROVIDER_KEY' },
          },
        ],
        policies: [
          // Tenant "leave": no pod meets a 1 ms SLO, so requests overflow, Bedrock listed first.
          {
            metadata: { name: 'leave', namespace: 'leave' },
            spec: {
              slo: { ttft: '1ms' },
              exclude: [],
              overflow: { providers: ['bedrock', 'hosted'] },
              wait: { max: '50ms' },
            },
          },
          // Tenant "bedrock": only Bedrock, which has no Responses API.
          {
            metadata: { name: 'bedrock-only', namespace: 'bedrock' },
            spec: { slo: { ttft: '1ms' }, exclude: [], overflow: { providers: ['bedrock'] }, wait: { max: '50ms' } },
          },
        ],
      },
    });
  });
  after(async () => {
    await stack.close();
    await provider.close();
  });

  const client = (tenant = 'team-a', headers: Record<string, string> = {}) =>
    new OpenAI({
      baseURL: `${stack.api}/v1`,
      apiKey: 'app-own-key',
      maxRetries: 0,
      defaultHeaders: { 'x-kinference-tenant': tenant, ...headers },
    });

  it('serves /v1/responses from a pod through the official client, streamed and not', async () => {
    const { data, response } = await client()
      .responses.create({ model: MODEL, input: 'Say hello', max_output_tokens: 6 })
      .withResponse();
    assert.match(response.headers.get('x-kinference-route') ?? '', /^local\/pod-[01]$/);
    assert.ok(Number(response.headers.get('x-kinference-predicted-ttft-ms')) > 0);
    assert.equal(data.status, 'completed');
    assert.equal(data.output_text.split(' ').length, 6);
    assert.equal(data.usage?.output_tokens, 6);

    const stream = await client().responses.create({
      model: MODEL,
      input: [{ role: 'user', content: 'Say hello' }],
      max_output_tokens: 5,
      stream: true,
    });
    const deltas: string[] = [];
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of stream) {
      if (event.type === 'response.output_text.delta') deltas.push(event.delta);
      if (event.type === 'response.completed') completed = event.response;
    }
    assert.equal(deltas.length, 5);
    assert.equal(
      completed?.output_text ??
        completed?.output
          .map((o) =>
            o.type === 'message' ? o.content.map((c) => (c.type === 'output_text' ? c.text : '')).join('') : '',
          )
          .join(''),
      deltas.join(''),
    );
  });

  it('ends a Responses stream that breaks after its first token with an error event the client raises', async () => {
    for (const sim of stack.sims) sim.setFault({ kind: 'reset-after-first-token', times: 1 });
    try {
      const stream = await client().responses.create({
        model: MODEL,
        input: 'Say hello',
        max_output_tokens: 40,
        stream: true,
      });
      const types: string[] = [];
      await assert.rejects(
        (async () => {
          for await (const event of stream) types.push(event.type);
        })(),
        (err: unknown) => err instanceof OpenAI.APIError && /upstream failed mid-stream/.test(err.message),
      );
      assert.ok(types.includes('response.output_text.delta'), types.join(','));
    } finally {
      for (const sim of stack.sims) sim.setFault(undefined);
    }
  });

  it('overflows /v1/responses to an OpenAI-compatible provider, skipping Bedrock, streamed and not', async () => {
    const { data, response } = await client('leave')
      .responses.create({ model: MODEL, input: 'Say hello' })
      .withResponse();
    assert.equal(response.headers.get('x-kinference-route'), 'overflow/hosted');
    assert.equal(data.output_text, 'Hello from the provider');
    const last = provider.requests.at(-1)!;
    assert.equal(last.path, '/v1/responses');
    assert.equal(last.body.model, 'hosted-llama');
    assert.equal(last.headers.authorization, 'Bearer sk-provider');

    const stream = await client('leave').responses.create({ model: MODEL, input: 'Say hello', stream: true });
    let text = '';
    for await (const event of stream) if (event.type === 'response.output_text.delta') text += event.delta;
    assert.equal(text, 'Hello from the provider');
  });

  it('answers 429 naming why when the only provider, Bedrock, cannot serve /v1/responses', async () => {
    const res = await postJson(
      `${stack.api}/v1/responses`,
      { model: MODEL, input: 'hi' },
      { 'x-kinference-tenant': 'bedrock' },
    );
    assert.equal(res.status, 429);
    const body = (await res.json()) as { error: { message: string } };
    assert.match(
      body.error.message,
      /provider bedrock \(bedrock\) serves chat completions and Anthropic Messages only: Bedrock has no Responses API/,
    );
  });

  it('refuses previous_response_id clearly instead of sending it to a pod that never saw it', async () => {
    await assert.rejects(
      client().responses.create({ model: MODEL, input: 'and then?', previous_response_id: 'resp_123' }),
      (err: unknown) => {
        assert.ok(err instanceof OpenAI.BadRequestError);
        assert.equal(err.param, 'previous_response_id');
        assert.match(err.message, /routes every request to whichever pod/);
        return true;
      },
    );
  });

  it("sends the pod its configured key, never the app's Authorization", async () => {
    seen.length = 0;
    const res = await postJson(`${stack.api}/v1/chat/completions`, chatBody(), { authorization: 'Bearer app-own-key' });
    assert.equal(res.status, 200);
    await res.arrayBuffer();
    const atPod = seen.find((s) => s.path === '/v1/chat/completions')!;
    assert.equal(atPod.headers.authorization, `Bearer ${POD_KEY}`);
  });

  it('carries the client traceparent, tracestate and x-request-id to the pod and the provider, and returns the id', async () => {
    seen.length = 0;
    const headers = { traceparent: TRACEPARENT, tracestate: 'vendor=abc', 'x-request-id': 'app-req-42' };
    const res = await postJson(`${stack.api}/v1/chat/completions`, chatBody(), headers);
    await res.arrayBuffer();
    assert.equal(res.headers.get('x-request-id'), 'app-req-42');
    const atPod = seen.find((s) => s.path === '/v1/chat/completions')!;
    assert.equal(atPod.headers.traceparent, TRACEPARENT);
    assert.equal(atPod.headers.tracestate, 'vendor=abc');
    assert.equal(atPod.headers['x-request-id'], 'app-req-42');

    await client('leave', headers).responses.create({ model: MODEL, input: 'hi' });
    const atProvider = provider.requests.at(-1)!;
    assert.equal(atProvider.headers.traceparent, TRACEPARENT);
    assert.equal(atProvider.headers['x-request-id'], 'app-req-42');

    // No id from the client: the agent makes one, returns it and sends the same to the pod.
    seen.length = 0;
    const fresh = await postJson(`${stack.api}/v1/chat/completions`, chatBody(), { traceparent: 'not-a-trace' });
    await fresh.arrayBuffer();
    const id = fresh.headers.get('x-request-id') ?? '';
    assert.match(id, /^[0-9a-f-]{36}$/);
    const pod = seen.find((s) => s.path === '/v1/chat/completions')!;
    assert.equal(pod.headers['x-request-id'], id);
    assert.equal(pod.headers.traceparent, undefined, 'a malformed traceparent is dropped');

    // Answers the agent gives itself carry one too.
    const models = await fetch(`${stack.api}/v1/models`, { headers: { 'x-request-id': 'list-1' } });
    assert.equal(models.headers.get('x-request-id'), 'list-1');
    const missing = await fetch(`${stack.api}/v1/nothing-here`, { method: 'POST' });
    assert.equal(missing.status, 404);
    assert.match(missing.headers.get('x-request-id') ?? '', /^[0-9a-f-]{36}$/);
  });

  it('passes /tokenize, /v1/rerank, /v1/score and /v1/moderations through to a pod', async () => {
    const cases: [string, Record<string, unknown>, (b: Record<string, unknown>) => void][] = [
      [
        '/tokenize',
        { model: MODEL, prompt: 'Hello there, how are you?' },
        (b) => assert.equal(b.count, (b.tokens as number[]).length),
      ],
      [
        '/v1/rerank',
        { model: MODEL, query: 'gpu pods', documents: ['bananas are yellow', 'pods with gpu'] },
        (b) => assert.equal((b.results as { index: number }[])[0].index, 1),
      ],
      [
        '/v1/score',
        { model: MODEL, text_1: 'gpu pods', text_2: ['gpu pods', 'bananas'] },
        (b) => assert.equal((b.data as unknown[]).length, 2),
      ],
      [
        '/v1/moderations',
        { model: MODEL, input: 'hello' },
        (b) => assert.equal((b.results as { flagged: boolean }[])[0].flagged, false),
      ],
    ];
    for (const [path, body, check] of cases) {
      seen.length = 0;
      const res = await postJson(`${stack.api}${path}`, body, { authorization: 'Bearer app-own-key' });
      assert.equal(res.status, 200, `${path}: ${res.status}`);
      assert.match(res.headers.get('x-kinference-route') ?? '', /^local\/pod-[01]$/, path);
      assert.ok(res.headers.get('x-request-id'));
      check((await res.json()) as Record<string, unknown>);
      assert.equal(seen.find((s) => s.path === path)?.headers.authorization, `Bearer ${POD_KEY}`, path);
    }
  });

  it('passes multipart audio transcriptions and translations through byte for byte', async () => {
    for (const path of ['/v1/audio/transcriptions', '/v1/audio/translations']) {
      const form = new FormData();
      form.set('model', MODEL);
      form.set('file', new Blob([new Uint8Array(6400)], { type: 'audio/wav' }), 'hello.wav');
      const res = await fetch(`${stack.api}${path}`, { method: 'POST', body: form });
      assert.equal(res.status, 200, path);
      assert.match(res.headers.get('x-kinference-route') ?? '', /^local\//);
      assert.deepEqual(await res.json(), { text: 'transcript of hello.wav (6400 bytes)' });
    }
    const audio = await client().audio.transcriptions.create({
      model: MODEL,
      file: new File([new Uint8Array(1280)], 'a.wav', { type: 'audio/wav' }),
    });
    assert.equal(audio.text, 'transcript of a.wav (1280 bytes)');
  });

  it('routes passthrough requests by load: a busy pod is passed over', async () => {
    const held = Array.from({ length: 20 }, () =>
      stack.sims[0].engine.submit({ promptTokens: 50, maxTokens: 100_000 }),
    );
    try {
      await waitFor(
        async () => {
          const state = (await (await fetch(`${stack.admin}/debug/state`)).json()) as {
            pods: { local: { pod: { name: string }; load?: { running: number } }[] };
          };
          return (state.pods.local.find((p) => p.pod.name === 'pod-0')?.load?.running ?? 0) >= 16;
        },
        5000,
        'pod-0 busy',
      );
      for (let i = 0; i < 4; i++) {
        const res = await postJson(`${stack.api}/tokenize`, { model: MODEL, prompt: 'hi' });
        assert.equal(res.headers.get('x-kinference-route'), 'local/pod-1');
        await res.arrayBuffer();
      }
    } finally {
      for (const h of held) if (h.accepted) h.seq.abort();
    }
  });

  it('answers 400 for a passthrough body without a model, and 404 for a model nobody serves', async () => {
    const missing = await postJson(`${stack.api}/v1/rerank`, { query: 'q', documents: ['a'] });
    assert.equal(missing.status, 400);
    assert.equal(((await missing.json()) as { error: { param: string } }).error.param, 'model');
    const unknown = await postJson(`${stack.api}/v1/score`, { model: 'nope', text_1: 'a', text_2: 'b' });
    assert.equal(unknown.status, 404);
    const broken = await fetch(`${stack.api}/v1/audio/transcriptions`, {
      method: 'POST',
      headers: { 'content-type': 'multipart/form-data; boundary=x' },
      body: 'garbage',
    });
    assert.equal(broken.status, 400);
  });

  it('writes one JSON log line per request with the decision, tags by name only', async () => {
    logLines.length = 0;
    const res = await postJson(`${stack.api}/v1/chat/completions`, chatBody('mail me at jane.doe@example.com'), {
      'x-request-id': 'log-1',
      'x-kinference-tenant': 'team-a',
    });
    await res.arrayBuffer();
    await waitFor(() => logLines.some((l) => l.includes('"log-1"')), 2000, 'log line');
    const line = logLines.find((l) => l.includes('"log-1"'))!;
    assert.ok(!line.includes('jane.doe'), 'no request text in the log');
    const r = JSON.parse(line) as Record<string, unknown>;
    assert.equal(r.requestId, 'log-1');
    assert.equal(r.tenant, 'team-a');
    assert.equal(r.model, MODEL);
    assert.deepEqual(r.tags, ['pii']);
    assert.match(String(r.route), /^local\/pod-[01]$/);
    assert.equal(r.outcome, 'ok');
    assert.equal(typeof r.policy, 'string');
    assert.ok((r.predictedTtftMs as number) > 0 && (r.ttftMs as number) > 0);
    assert.equal(r.completionTokens, 8);
    assert.ok((r.promptTokensEstimate as number) > 0);
  });

  it('writes the line of a stream the client left as broken, when it ends', async () => {
    const controller = new AbortController();
    const res = await fetch(`${stack.api}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-request-id': 'log-left' },
      body: JSON.stringify(chatBody('Hello', { stream: true, max_tokens: 500 })),
      signal: controller.signal,
    });
    const reader = res.body!.getReader();
    await reader.read();
    controller.abort();
    await waitFor(() => logLines.some((l) => l.includes('"log-left"')), 5000, 'log line of the abandoned stream');
    const r = JSON.parse(logLines.find((l) => l.includes('"log-left"'))!) as Record<string, unknown>;
    assert.equal(r.outcome, 'broken');
    assert.equal(r.stream, true);
    assert.ok(typeof r.durationMs === 'number');
  });
});

describe('pods that require an API key the agent does not have', () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack({ pods: [{ apiKey: 'only-the-pod-knows' }] });
  });
  after(async () => stack.close());

  it('fails with 502 naming the credentials, not a 401 that blames the app', async () => {
    const res = await postJson(`${stack.api}/v1/chat/completions`, chatBody(), { authorization: 'Bearer app-own-key' });
    assert.equal(res.status, 502);
    assert.match(
      ((await res.json()) as { error: { message: string } }).error.message,
      /failed before answering \(tried 1 pod: local\/[\w-]+; last: pod rejected the agent's credentials \(HTTP 401\): check podCredentials\)/,
    );
  });
});
