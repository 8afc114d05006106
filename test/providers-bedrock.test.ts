import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { Agent } from 'undici';
import { bedrockRegion, converseUrl, createBedrockProvider } from '../agent/providers/bedrock.ts';
import {
  bedrockErrorStatus,
  finishReason,
  fromConverseResponse,
  toConverseRequest,
  TranslationError,
} from '../agent/providers/bedrock-converse.ts';
import {
  ConverseStreamTranslator,
  EventStreamDecoder,
  EventStreamError,
  type StreamEvent,
} from '../agent/providers/bedrock-stream.ts';
import { ProviderError, type ClosableProvider } from '../agent/providers/upstream.ts';
import type { Provider, ProviderSettings } from '../agent/providers/types.ts';
import {
  eventFrame,
  exceptionFrame,
  startBedrockStandin,
  streamEvents,
  type BedrockStandin,
} from './fixtures/bedrock-standin.ts';

const ACCESS_KEY = 'AKIDEXAMPLE1234567';
const SECRET_KEY = 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY';
const SESSION_TOKEN = 'FwoGZXIvYXdzEXAMPLESESSIONTOKEN0123456789';
const API_KEY = 'ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl';
const MODEL_ID = 'meta.llama3-1-8b-instruct-v1:0';
const env = { AK: ACCESS_KEY, SK: SECRET_KEY, ST: SESSION_TOKEN, BEDROCK_KEY: API_KEY, WRONG_SK: `${SECRET_KEY}x` };

function settings(endpoint: string, over: Partial<ProviderSettings> = {}): ProviderSettings {
  return {
    name: 'bedrock',
    kind: 'bedrock',
    region: 'us-east-1',
    endpoint,
    models: { 'llama-3-8b': MODEL_ID },
    credentials: { accessKeyId: { env: 'AK' }, secretAccessKey: { env: 'SK' } },
    timeoutMs: 2_000,
    ...over,
  };
}

function call(body: Record<string, unknown>, signal = new AbortController().signal) {
  return { kind: 'chat' as const, model: 'llama-3-8b', body: { model: 'llama-3-8b', ...body }, signal };
}

const chatBody = { messages: [{ role: 'user', content: 'hi' }] };

function clientFor(provider: Provider): OpenAI {
  return new OpenAI({
    apiKey: 'not-used',
    baseURL: 'http://kinference.invalid/v1',
    maxRetries: 0,
    fetch: async (_url, init) => {
      const body = JSON.parse(String(init?.body)) as Record<string, unknown>;
      return provider.send({
        kind: 'chat',
        model: String(body.model),
        body,
        signal: init?.signal ?? new AbortController().signal,
      });
    },
  });
}

function sseData(text: string): string[] {
  return text
    .split(/\n\n/)
    .filter((e) => e.trim() !== '')
    .map((e) => {
      assert.match(e, /^data: /);
      return e.slice(6);
    });
}

type Chunk = { choices: Array<{ delta: Record<string, unknown>; finish_reason: string | null }>; usage?: unknown };

describe('OpenAI chat → Converse translation', () => {
  test('moves system and developer messages to system, merges same-role turns', () => {
    const req = toConverseRequest({
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'developer', content: [{ type: 'text', text: 'Use metric units.' }] },
        { role: 'user', content: 'Hi' },
        { role: 'user', content: [{ type: 'text', text: 'How far is the moon?' }] },
        { role: 'assistant', content: 'About 384,000 km.' },
        { role: 'user', content: 'Thanks' },
      ],
    });
    assert.deepEqual(req.system, [{ text: 'Be brief.' }, { text: 'Use metric units.' }]);
    assert.deepEqual(req.messages, [
      { role: 'user', content: [{ text: 'Hi' }, { text: 'How far is the moon?' }] },
      { role: 'assistant', content: [{ text: 'About 384,000 km.' }] },
      { role: 'user', content: [{ text: 'Thanks' }] },
    ]);
  });

  test('maps sampling parameters, preferring max_completion_tokens', () => {
    const req = toConverseRequest({
      messages: [{ role: 'user', content: 'x' }],
      max_tokens: 10,
      max_completion_tokens: 20,
      temperature: 0.2,
      top_p: 0.9,
      stop: 'END',
    });
    assert.deepEqual(req.inferenceConfig, { maxTokens: 20, temperature: 0.2, topP: 0.9, stopSequences: ['END'] });
    assert.deepEqual(
      toConverseRequest({ messages: [{ role: 'user', content: 'x' }], stop: ['a', 'b'] }).inferenceConfig,
      { stopSequences: ['a', 'b'] },
    );
    assert.equal(toConverseRequest({ messages: [{ role: 'user', content: 'x' }] }).inferenceConfig, undefined);
  });

  test('turns tools, tool calls and tool results into Converse blocks', () => {
    const req = toConverseRequest({
      messages: [
        { role: 'user', content: 'Weather in Paris and Rome?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } },
            { id: 'call_2', type: 'function', function: { name: 'weather', arguments: '{"city":"Rome"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: '18C' },
        { role: 'tool', tool_call_id: 'call_2', content: [{ type: 'text', text: '24C' }] },
        { role: 'user', content: 'Which is warmer?' },
      ],
      tools: [
        {
          type: 'function',
          function: {
            name: 'weather',
            description: 'Current weather',
            parameters: { type: 'object', properties: { city: { type: 'string' } } },
          },
        },
      ],
      tool_choice: 'required',
    });
    assert.deepEqual(req.messages, [
      { role: 'user', content: [{ text: 'Weather in Paris and Rome?' }] },
      {
        role: 'assistant',
        content: [
          { toolUse: { toolUseId: 'call_1', name: 'weather', input: { city: 'Paris' } } },
          { toolUse: { toolUseId: 'call_2', name: 'weather', input: { city: 'Rome' } } },
        ],
      },
      {
        role: 'user',
        content: [
          { toolResult: { toolUseId: 'call_1', content: [{ text: '18C' }] } },
          { toolResult: { toolUseId: 'call_2', content: [{ text: '24C' }] } },
          { text: 'Which is warmer?' },
        ],
      },
    ]);
    assert.deepEqual(req.toolConfig, {
      tools: [
        {
          toolSpec: {
            name: 'weather',
            description: 'Current weather',
            inputSchema: { json: { type: 'object', properties: { city: { type: 'string' } } } },
          },
        },
      ],
      toolChoice: { any: {} },
    });
  });

  test('maps tool_choice auto, a named function, and none', () => {
    const tools = [{ type: 'function', function: { name: 'f' } }];
    const msgs = [{ role: 'user', content: 'x' }];
    assert.deepEqual(toConverseRequest({ messages: msgs, tools }).toolConfig?.toolChoice, { auto: {} });
    assert.deepEqual(
      toConverseRequest({ messages: msgs, tools, tool_choice: { type: 'function', function: { name: 'f' } } })
        .toolConfig?.toolChoice,
      { tool: { name: 'f' } },
    );
    assert.equal(toConverseRequest({ messages: msgs, tools, tool_choice: 'none' }).toolConfig, undefined);
    assert.deepEqual(toConverseRequest({ messages: msgs, tools }).toolConfig?.tools[0].toolSpec.inputSchema, {
      json: { type: 'object', properties: {} },
    });
  });

  test('accepts base64 images and refuses what Converse cannot take', () => {
    const req = toConverseRequest({
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
            { type: 'text', text: 'what is it?' },
          ],
        },
      ],
    });
    assert.deepEqual(req.messages[0].content, [
      { image: { format: 'png', source: { bytes: 'iVBORw0KGgo=' } } },
      { text: 'what is it?' },
    ]);
    assert.throws(
      () =>
        toConverseRequest({
          messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x/y.png' } }] }],
        }),
      (e: unknown) => e instanceof TranslationError && e.param === 'messages[0].content[0]',
    );
    assert.throws(() => toConverseRequest({ messages: [{ role: 'user', content: 'x' }], n: 2 }), TranslationError);
    assert.throws(
      () =>
        toConverseRequest({
          messages: [
            {
              role: 'assistant',
              content: '',
              tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{oops' } }],
            },
          ],
        }),
      (e: unknown) => e instanceof TranslationError && e.param === 'messages[0].tool_calls[0].function.arguments',
    );
  });

  test('maps every stop reason', () => {
    assert.equal(finishReason('end_turn'), 'stop');
    assert.equal(finishReason('stop_sequence'), 'stop');
    assert.equal(finishReason('max_tokens'), 'length');
    assert.equal(finishReason('tool_use'), 'tool_calls');
    assert.equal(finishReason('guardrail_intervened'), 'content_filter');
    assert.equal(finishReason('content_filtered'), 'content_filter');
  });

  test('turns a Converse response into a chat.completion with usage', () => {
    const meta = { id: 'chatcmpl-x', created: 1, model: MODEL_ID };
    const text = fromConverseResponse(
      {
        output: { message: { role: 'assistant', content: [{ text: 'Hi ' }, { text: 'there' }] } },
        stopReason: 'max_tokens',
        usage: { inputTokens: 7, outputTokens: 3, totalTokens: 10 },
      },
      meta,
    );
    assert.deepEqual(text, {
      id: 'chatcmpl-x',
      object: 'chat.completion',
      created: 1,
      model: MODEL_ID,
      choices: [
        { index: 0, message: { role: 'assistant', content: 'Hi there' }, logprobs: null, finish_reason: 'length' },
      ],
      usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 },
    });
    const tool = fromConverseResponse(
      {
        output: { message: { content: [{ toolUse: { toolUseId: 't1', name: 'weather', input: { city: 'Paris' } } }] } },
        stopReason: 'tool_use',
        usage: { inputTokens: 1, outputTokens: 2 },
      },
      meta,
    );
    assert.deepEqual((tool.choices as unknown[])[0], {
      index: 0,
      message: {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 't1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } }],
      },
      logprobs: null,
      finish_reason: 'tool_calls',
    });
    assert.deepEqual(tool.usage, { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 });
  });

  test('maps Bedrock errors to sensible statuses', () => {
    assert.equal(bedrockErrorStatus('ThrottlingException:http://internal.amazon.com/coral/', 429), 429);
    assert.equal(bedrockErrorStatus('ValidationException', 400), 400);
    assert.equal(bedrockErrorStatus('InternalServerException', 500), 502);
    assert.equal(bedrockErrorStatus('ServiceUnavailableException', 503), 503);
    assert.equal(bedrockErrorStatus('modelStreamErrorException', 500), 502);
    assert.equal(bedrockErrorStatus('AccessDeniedException', 403), 403);
    assert.equal(bedrockErrorStatus(undefined, 500), 502);
  });

  test('builds the model URL with the id encoded, and finds the region in a standard endpoint', () => {
    assert.equal(
      converseUrl('https://bedrock-runtime.eu-west-1.amazonaws.com/', MODEL_ID, true).pathname,
      '/model/meta.llama3-1-8b-instruct-v1%3A0/converse-stream',
    );
    assert.equal(
      bedrockRegion({
        name: 'b',
        kind: 'bedrock',
        models: {},
        timeoutMs: 1,
        endpoint: 'https://bedrock-runtime.eu-west-1.amazonaws.com',
      }),
      'eu-west-1',
    );
  });
});

describe('event-stream decoding', () => {
  const frames = streamEvents({ text: 'one two', usage: { inputTokens: 1, outputTokens: 2, totalTokens: 3 } }).map(
    ([t, p]) => eventFrame(t, p),
  );
  const all = Buffer.concat(frames);

  test('decodes frames fed one byte at a time', () => {
    const decoder = new EventStreamDecoder();
    const events: StreamEvent[] = [];
    for (const byte of all) events.push(...decoder.push(Uint8Array.of(byte)));
    assert.deepEqual(
      events.map((e) => (e.type === 'event' ? e.eventType : e.type)),
      ['messageStart', 'contentBlockDelta', 'contentBlockDelta', 'contentBlockStop', 'messageStop', 'metadata'],
    );
    assert.equal(decoder.pending, false);
    const first = events[0] as Extract<StreamEvent, { type: 'event' }>;
    assert.equal(first.payload.role, 'assistant');
    assert.equal(typeof first.payload.p, 'string');
  });

  test('decodes many frames in one chunk, and a chunk ending inside a prelude', () => {
    const decoder = new EventStreamDecoder();
    assert.equal(decoder.push(all.subarray(0, frames[0].length + frames[1].length + 5)).length, 2);
    assert.equal(decoder.pending, true);
    assert.equal(decoder.push(all.subarray(frames[0].length + frames[1].length + 5)).length, 4);
  });

  test('rejects a frame whose message CRC is wrong', () => {
    const bad = Buffer.from(frames[1]);
    bad[bad.length - 6] ^= 0x01;
    const decoder = new EventStreamDecoder();
    decoder.push(frames[0]);
    assert.throws(() => decoder.push(bad), EventStreamError);
  });

  test('rejects a frame whose prelude CRC is wrong before trusting its length', () => {
    const bad = Buffer.from(frames[0]);
    bad[1] ^= 0x7f;
    assert.throws(() => new EventStreamDecoder().push(bad), /prelude/);
  });

  test('decodes exception frames', () => {
    const [ev] = new EventStreamDecoder().push(exceptionFrame('throttlingException', 'Too many tokens'));
    assert.deepEqual(ev, { type: 'exception', exceptionType: 'throttlingException', message: 'Too many tokens' });
  });
});

describe('ConverseStream → OpenAI chunks', () => {
  const meta = { id: 'chatcmpl-1', created: 1, model: MODEL_ID };
  const ev = (eventType: string, payload: Record<string, unknown>): StreamEvent => ({
    type: 'event',
    eventType,
    payload,
  });

  function run(t: ConverseStreamTranslator, events: StreamEvent[]): string[] {
    return [...events.flatMap((e) => t.event(e)), ...t.end()].flatMap(sseData);
  }

  test('emits role, text, finish, then usage from metadata and [DONE]', () => {
    const out = run(
      new ConverseStreamTranslator({ ...meta, includeUsage: true }),
      streamEvents({ text: 'a b', usage: { inputTokens: 4, outputTokens: 2, totalTokens: 6 } }).map(([t, p]) =>
        ev(t, p),
      ),
    );
    assert.equal(out.at(-1), '[DONE]');
    const chunks = out.slice(0, -1).map((d) => JSON.parse(d) as Chunk);
    assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
    assert.deepEqual(
      chunks.slice(1, 3).map((c) => c.choices[0].delta.content),
      ['a', ' b'],
    );
    assert.equal(chunks[3].choices[0].finish_reason, 'stop');
    assert.deepEqual(chunks[4], {
      id: 'chatcmpl-1',
      object: 'chat.completion.chunk',
      created: 1,
      model: MODEL_ID,
      choices: [],
      usage: { prompt_tokens: 4, completion_tokens: 2, total_tokens: 6 },
    });
    assert.ok(chunks.slice(0, 4).every((c) => c.usage === null));
  });

  test('without include_usage there is no usage chunk and no usage field', () => {
    const out = run(
      new ConverseStreamTranslator({ ...meta, includeUsage: false }),
      streamEvents({ text: 'a' }).map(([t, p]) => ev(t, p)),
    );
    const chunks = out.slice(0, -1).map((d) => JSON.parse(d) as Chunk);
    assert.ok(chunks.every((c) => c.choices.length === 1 && !('usage' in c)));
  });

  test('numbers tool calls from 0 even when a text block comes first', () => {
    const out = run(
      new ConverseStreamTranslator({ ...meta, includeUsage: false }),
      streamEvents({
        text: 'Let me check.',
        toolUse: { toolUseId: 'tu_1', name: 'weather', input: { city: 'Paris' } },
      }).map(([t, p]) => ev(t, p)),
    );
    const chunks = out.slice(0, -1).map((d) => JSON.parse(d) as Chunk);
    const calls = chunks.flatMap(
      (c) => (c.choices[0].delta.tool_calls as Array<Record<string, unknown>> | undefined) ?? [],
    );
    assert.deepEqual(calls[0], {
      index: 0,
      id: 'tu_1',
      type: 'function',
      function: { name: 'weather', arguments: '' },
    });
    assert.equal(
      calls
        .slice(1)
        .map((c) => (c.function as { arguments: string }).arguments)
        .join(''),
      '{"city":"Paris"}',
    );
    assert.ok(calls.every((c) => c.index === 0));
    assert.equal(chunks.at(-1)?.choices[0].finish_reason, 'tool_calls');
  });

  test('a stream cut before messageStop ends with an error event', () => {
    const out = run(new ConverseStreamTranslator({ ...meta, includeUsage: false }), [
      ev('messageStart', { role: 'assistant' }),
    ]);
    assert.equal(out.length, 3);
    assert.match(out[1], /"error"/);
    assert.equal(out[2], '[DONE]');
  });
});

describe('Bedrock provider against the stand-in', () => {
  let standin: BedrockStandin;
  let provider: ClosableProvider;

  before(async () => {
    standin = await startBedrockStandin({
      credentials: { accessKeyId: ACCESS_KEY, secretAccessKey: SECRET_KEY },
      apiKey: API_KEY,
    });
    provider = createBedrockProvider(settings(standin.url), { env });
  });
  after(async () => {
    await provider.close();
    await standin.close();
  });
  beforeEach(() => {
    standin.requests.length = 0;
    standin.rejected = 0;
    standin.fault = undefined;
    standin.reply = { text: 'Hello from Bedrock' };
  });

  test('signs Converse with SigV4 and answers a chat.completion the official client reads', async () => {
    const completion = await clientFor(provider).chat.completions.create({
      model: 'llama-3-8b',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'hi' },
      ],
      max_tokens: 50,
    });
    assert.equal(completion.choices[0].message.content, 'Hello from Bedrock');
    assert.equal(completion.choices[0].finish_reason, 'stop');
    assert.deepEqual(completion.usage, { prompt_tokens: 12, completion_tokens: 4, total_tokens: 16 });
    assert.equal(completion.model, MODEL_ID);
    const [req] = standin.requests;
    assert.equal(req.auth, 'sigv4');
    assert.equal(req.path, '/model/meta.llama3-1-8b-instruct-v1%3A0/converse');
    assert.equal(req.modelId, MODEL_ID);
    assert.deepEqual(req.body, {
      messages: [{ role: 'user', content: [{ text: 'hi' }] }],
      system: [{ text: 'Be brief.' }],
      inferenceConfig: { maxTokens: 50 },
    });
  });

  test('signs with a session token too', async () => {
    const sts = await startBedrockStandin({
      credentials: { accessKeyId: ACCESS_KEY, secretAccessKey: SECRET_KEY, sessionToken: SESSION_TOKEN },
    });
    const p = createBedrockProvider(
      settings(sts.url, {
        credentials: { accessKeyId: { env: 'AK' }, secretAccessKey: { env: 'SK' }, sessionToken: { env: 'ST' } },
      }),
      { env },
    );
    try {
      const res = await p.send(call(chatBody));
      assert.equal(res.status, 200);
      assert.equal(sts.requests[0].headers['x-amz-security-token'], SESSION_TOKEN);
    } finally {
      await p.close();
      await sts.close();
    }
  });

  test('a wrong secret is refused (403) and no credential leaks into the error', async () => {
    const sts = await startBedrockStandin({
      credentials: { accessKeyId: ACCESS_KEY, secretAccessKey: SECRET_KEY, sessionToken: SESSION_TOKEN },
    });
    const wrong = createBedrockProvider(
      settings(sts.url, {
        credentials: { accessKeyId: { env: 'AK' }, secretAccessKey: { env: 'WRONG_SK' }, sessionToken: { env: 'ST' } },
      }),
      { env },
    );
    try {
      const res = await wrong.send(call(chatBody));
      assert.equal(res.status, 403);
      assert.equal(sts.rejected, 1);
      const text = await res.text();
      for (const secret of [SECRET_KEY, SESSION_TOKEN, ACCESS_KEY]) assert.ok(!text.includes(secret), text);
      assert.equal((JSON.parse(text) as { error: { code: string } }).error.code, 'InvalidSignatureException');
    } finally {
      await wrong.close();
      await sts.close();
    }
  });

  test('the stand-in really checks the signature: a skewed clock is refused', async () => {
    const skewed = createBedrockProvider(settings(standin.url), { env, now: () => Date.now() - 3_600_000 });
    try {
      const res = await skewed.send(call(chatBody));
      assert.equal(res.status, 403);
      assert.equal(standin.rejected, 1);
    } finally {
      await skewed.close();
    }
  });

  test('sends a Bedrock API key as a bearer token', async () => {
    const p = createBedrockProvider(settings(standin.url, { credentials: undefined, apiKey: { env: 'BEDROCK_KEY' } }), {
      env,
    });
    try {
      const res = await p.send(call(chatBody));
      assert.equal(res.status, 200);
      assert.equal(standin.requests[0].auth, 'bearer');
      assert.equal(standin.requests[0].headers.authorization, `Bearer ${API_KEY}`);
    } finally {
      await p.close();
    }
  });

  test('streams ConverseStream as chat.completion.chunk SSE with usage after the finish', async () => {
    const stream = await clientFor(provider).chat.completions.create({
      model: 'llama-3-8b',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let finish: string | null = null;
    let usage: unknown;
    let lastHadChoices = true;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) usage = chunk.usage;
      lastHadChoices = chunk.choices.length > 0;
    }
    assert.equal(text, 'Hello from Bedrock');
    assert.equal(finish, 'stop');
    assert.deepEqual(usage, { prompt_tokens: 12, completion_tokens: 4, total_tokens: 16 });
    assert.equal(lastHadChoices, false);
    assert.equal(standin.requests[0].operation, 'converse-stream');
    assert.equal(standin.requests[0].body.stream_options, undefined);
  });

  test('reuses its connection from one stream to the next', async () => {
    const fresh = await startBedrockStandin({ credentials: { accessKeyId: ACCESS_KEY, secretAccessKey: SECRET_KEY } });
    const agent = new Agent();
    const p = createBedrockProvider(settings(fresh.url), { env, dispatcher: agent });
    const busy = () => {
      const stats = agent.stats[fresh.url] as { running?: number } | undefined;
      return (stats?.running ?? 0) > 0;
    };
    try {
      for (let i = 0; i < 3; i++) {
        const data = sseData(await (await p.send(call({ ...chatBody, stream: true }))).text());
        assert.equal(data.at(-1), '[DONE]');
        // The end of the HTTP body is read after [DONE]; wait until the socket is back in the pool.
        while (busy()) await new Promise((r) => setTimeout(r, 1));
      }
      assert.equal(fresh.connections, 1);
    } finally {
      await agent.close();
      await fresh.close();
    }
  });

  test('streams tool use as tool_calls deltas the official client can assemble', async () => {
    standin.reply = { toolUse: { toolUseId: 'tooluse_abc', name: 'weather', input: { city: 'Paris', unit: 'C' } } };
    const stream = await clientFor(provider).chat.completions.create({
      model: 'llama-3-8b',
      messages: [{ role: 'user', content: 'weather in Paris?' }],
      tools: [{ type: 'function', function: { name: 'weather', parameters: { type: 'object' } } }],
      stream: true,
    });
    let id = '';
    let name = '';
    let args = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      for (const tc of chunk.choices[0]?.delta.tool_calls ?? []) {
        assert.equal(tc.index, 0);
        id ||= tc.id ?? '';
        name ||= tc.function?.name ?? '';
        args += tc.function?.arguments ?? '';
      }
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.deepEqual(
      { id, name, args: JSON.parse(args) as unknown, finish },
      { id: 'tooluse_abc', name: 'weather', args: { city: 'Paris', unit: 'C' }, finish: 'tool_calls' },
    );
    assert.deepEqual(standin.requests[0].body.toolConfig, {
      tools: [{ toolSpec: { name: 'weather', inputSchema: { json: { type: 'object' } } } }],
      toolChoice: { auto: {} },
    });
  });

  test('a non-stream tool use comes back as tool_calls', async () => {
    standin.reply = { toolUse: { toolUseId: 'tooluse_abc', name: 'weather', input: { city: 'Rome' } } };
    const completion = await clientFor(provider).chat.completions.create({
      model: 'llama-3-8b',
      messages: [{ role: 'user', content: 'x' }],
      tools: [{ type: 'function', function: { name: 'weather' } }],
    });
    assert.equal(completion.choices[0].finish_reason, 'tool_calls');
    const tc = completion.choices[0].message.tool_calls?.[0];
    assert.ok(tc && tc.type === 'function');
    assert.deepEqual(JSON.parse(tc.function.arguments), { city: 'Rome' });
  });

  test('an exception mid-stream ends the SSE with an error event and [DONE]', async () => {
    standin.fault = {
      kind: 'exception',
      afterEvents: 2,
      exceptionType: 'modelStreamErrorException',
      message: 'model failed',
    };
    const res = await provider.send(call({ ...chatBody, stream: true }));
    assert.equal(res.status, 200);
    const data = sseData(await res.text());
    assert.equal(data.at(-1), '[DONE]');
    const err = JSON.parse(data.at(-2)!) as { error: { message: string; code: string } };
    assert.deepEqual([err.error.message, err.error.code], ['model failed', 'modelStreamErrorException']);
    assert.equal((JSON.parse(data[1]) as Chunk).choices[0].delta.content, 'Hello');
  });

  test('throttling as the first event is a 429 before any byte', async () => {
    standin.fault = {
      kind: 'exception',
      afterEvents: 0,
      exceptionType: 'throttlingException',
      message: 'Too many requests',
    };
    const res = await provider.send(call({ ...chatBody, stream: true }));
    assert.equal(res.status, 429);
    assert.equal(((await res.json()) as { error: { type: string } }).error.type, 'rate_limit_error');
  });

  test('a frame with a bad CRC ends the stream with an error event', async () => {
    standin.fault = { kind: 'bad-crc', atEvent: 2 };
    const data = sseData(await (await provider.send(call({ ...chatBody, stream: true }))).text());
    assert.equal(data.at(-1), '[DONE]');
    assert.match(data.at(-2)!, /checksum/);
  });

  test('a stream cut inside a frame ends with an error event', async () => {
    standin.fault = { kind: 'truncate', atEvent: 3 };
    const data = sseData(await (await provider.send(call({ ...chatBody, stream: true }))).text());
    assert.equal(data.at(-1), '[DONE]');
    assert.match(data.at(-2)!, /"upstream_stream_error"/);
  });

  test('a stream without metadata still finishes cleanly', async () => {
    standin.fault = { kind: 'no-metadata' };
    const data = sseData(
      await (await provider.send(call({ ...chatBody, stream: true, stream_options: { include_usage: true } }))).text(),
    );
    assert.equal(data.at(-1), '[DONE]');
    assert.equal((JSON.parse(data.at(-2)!) as Chunk).choices[0].finish_reason, 'stop');
    assert.ok(!data.some((d) => d.includes('"error"')));
  });

  test('maps Bedrock HTTP errors to OpenAI errors', async () => {
    const cases: Array<[number, string, number, string]> = [
      [429, 'ThrottlingException', 429, 'rate_limit_error'],
      [400, 'ValidationException', 400, 'invalid_request_error'],
      [500, 'InternalServerException', 502, 'upstream_error'],
      [503, 'ServiceUnavailableException', 503, 'service_unavailable_error'],
    ];
    for (const [status, errorType, want, type] of cases) {
      standin.fault = { kind: 'error', status, errorType, message: `${errorType} happened` };
      for (const stream of [false, true]) {
        const res = await provider.send(call({ ...chatBody, stream }));
        assert.equal(res.status, want, errorType);
        const body = (await res.json()) as { error: { message: string; type: string; code: string } };
        assert.deepEqual(body.error, { message: `${errorType} happened`, type, param: null, code: errorType });
      }
    }
  });

  test('times out when Bedrock does not answer', async () => {
    standin.fault = { kind: 'hang' };
    const quick = createBedrockProvider(settings(standin.url, { timeoutMs: 150 }), { env });
    try {
      await assert.rejects(
        quick.send(call(chatBody)),
        (e: unknown) => e instanceof ProviderError && e.reason === 'timeout',
      );
      await assert.rejects(
        quick.send(call({ ...chatBody, stream: true })),
        (e: unknown) => e instanceof ProviderError && e.reason === 'timeout',
      );
    } finally {
      await quick.close();
    }
  });

  test('a stream whose first event does not come in time is a timeout, so the chain can move on', async () => {
    standin.fault = { kind: 'stall' };
    const quick = createBedrockProvider(settings(standin.url, { timeoutMs: 150 }), { env });
    try {
      await assert.rejects(
        quick.send(call({ ...chatBody, stream: true })),
        (e: unknown) => e instanceof ProviderError && e.reason === 'timeout',
      );
    } finally {
      await quick.close();
    }
  });

  test('refuses a request it cannot translate without calling Bedrock', async () => {
    const res = await provider.send(
      call({ messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: {} }] }] }),
    );
    assert.equal(res.status, 400);
    assert.equal(((await res.json()) as { error: { param: string } }).error.param, 'messages[0].content[0]');
    assert.equal(standin.requests.length, 0);
  });

  test('serves chat only', () => {
    assert.equal(provider.supports('chat', 'llama-3-8b'), true);
    assert.equal(provider.supports('completions', 'llama-3-8b'), false);
    assert.equal(provider.supports('embeddings', 'llama-3-8b'), false);
    assert.equal(provider.supports('chat', 'gpt-4o'), false);
  });

  test('refuses settings without credentials', () => {
    assert.throws(
      () => createBedrockProvider(settings(standin.url, { credentials: undefined })),
      /apiKey or credentials/,
    );
  });
});
