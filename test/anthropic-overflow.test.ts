// POST /v1/messages overflowing, end to end with Anthropic's own SDK as the client: to Claude on
// Bedrock (a SigV4-signed Converse call to the Bedrock stand-in, its binary event stream turned
// into Anthropic's named events) and to an Anthropic-compatible provider (the stand-in checks
// x-api-key and anthropic-version; the stream passes through as it came). Data the policy keeps
// home never reaches either; every failure reads as an Anthropic error.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startBedrockStandin, type BedrockStandin } from './fixtures/bedrock-standin.ts';
import { startAnthropicStandin, streamEvents, type AnthropicStandin } from './fixtures/anthropic-standin.ts';
import { usedTokens } from '../agent/budget/spend.ts';
import { MODEL, postJson, startStack, type Stack } from './helpers/stack.ts';
import { createOpenAIProvider } from '../agent/providers/openai.ts';
import { Overflow } from '../agent/providers/overflow.ts';
import { MessagesStreamTranslator } from '../agent/providers/messages-stream.ts';
import { settingsFromObject } from '../agent/config/load.ts';
import { BUILTIN_DEFAULT } from '../agent/policy/resolve.ts';

const CREDENTIALS = { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY' };
const CLAUDE_ID = 'anthropic.claude-sonnet-4-20250514-v1:0';
const API_KEY = 'sk-ant-standin-key-0123456789';

/** No pod can meet 1 ms: every request that may leave overflows, to these providers. */
const overflowTo = (providers: string[]) => [
  {
    metadata: { name: 'default', namespace: '*' },
    spec: { slo: { ttft: '1ms' }, exclude: [], overflow: { providers }, wait: { max: '200ms' } },
  },
];

const ask = (extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  max_tokens: 64,
  messages: [{ role: 'user' as const, content: 'Hello' }],
  ...extra,
});

/** The named events of an SSE body, in order. */
const eventNames = (sse: string) => [...sse.matchAll(/^event: (\S+)$/gm)].map((m) => m[1]);

describe('/v1/messages overflow to Claude on Bedrock', () => {
  let stack: Stack;
  let bedrock: BedrockStandin;
  let client: Anthropic;
  before(async () => {
    process.env.KINFERENCE_TEST_AWS_KEY_ID = CREDENTIALS.accessKeyId;
    process.env.KINFERENCE_TEST_AWS_SECRET = CREDENTIALS.secretAccessKey;
    bedrock = await startBedrockStandin({ credentials: CREDENTIALS, region: 'us-east-1' });
    stack = await startStack({
      config: {
        providers: [
          {
            name: 'bedrock',
            kind: 'bedrock',
            region: 'us-east-1',
            endpoint: bedrock.url,
            models: { [MODEL]: CLAUDE_ID },
            credentials: {
              accessKeyId: { env: 'KINFERENCE_TEST_AWS_KEY_ID' },
              secretAccessKey: { env: 'KINFERENCE_TEST_AWS_SECRET' },
            },
          },
        ],
        policies: overflowTo(['bedrock']),
      },
    });
    client = new Anthropic({ baseURL: stack.api, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    await stack.close();
    await bedrock.close();
  });

  it('answers a Messages request through a signed Converse call, in Anthropic’s shape', async () => {
    bedrock.reply = { text: 'Hello from Bedrock', usage: { inputTokens: 21, outputTokens: 4, totalTokens: 25 } };
    const { data, response } = await client.messages
      .create(
        ask({
          system: [{ type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral' } }],
          stop_sequences: ['END'],
          top_k: 5,
        }),
      )
      .withResponse();
    assert.equal(response.headers.get('x-kinference-route'), 'overflow/bedrock');
    assert.equal(data.type, 'message');
    assert.deepEqual(data.content, [{ type: 'text', text: 'Hello from Bedrock' }]);
    assert.equal(data.stop_reason, 'end_turn');
    assert.deepEqual(data.usage, { input_tokens: 21, output_tokens: 4 });
    const sent = bedrock.requests.at(-1)!;
    assert.equal(sent.operation, 'converse');
    assert.equal(sent.modelId, CLAUDE_ID);
    assert.deepEqual(sent.body.system, [{ text: 'Be brief.' }, { cachePoint: { type: 'default' } }]);
    assert.deepEqual(sent.body.messages, [{ role: 'user', content: [{ text: 'Hello' }] }]);
    assert.deepEqual(sent.body.inferenceConfig, { maxTokens: 64, stopSequences: ['END'] });
    assert.deepEqual(sent.body.additionalModelRequestFields, { top_k: 5 });
  });

  it('streams ConverseStream as Anthropic’s event sequence, usage in message_delta', async () => {
    bedrock.reply = { text: 'one two three', usage: { inputTokens: 9, outputTokens: 3, totalTokens: 12 } };
    const res = await postJson(`${stack.api}/v1/messages`, ask({ stream: true }));
    assert.equal(res.status, 200);
    const sse = await res.text();
    assert.deepEqual(eventNames(sse), [
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    const delta = sse.split('\n').find((l) => l.startsWith('data: {"type":"message_delta"'))!;
    assert.deepEqual(JSON.parse(delta.slice(6)), {
      type: 'message_delta',
      delta: { stop_reason: 'end_turn', stop_sequence: null },
      usage: { input_tokens: 9, output_tokens: 3 },
    });
    assert.equal(bedrock.requests.at(-1)!.operation, 'converse-stream');
  });

  it('streams a tool call the SDK assembles, input JSON and all', async () => {
    bedrock.reply = {
      text: 'Looking it up',
      toolUse: { toolUseId: 'tooluse_1', name: 'get_weather', input: { city: 'Paris', days: 3 } },
    };
    const final = await client.messages
      .stream(
        ask({
          tools: [{ name: 'get_weather', description: 'weather', input_schema: { type: 'object', properties: {} } }],
          tool_choice: { type: 'any' },
        }),
      )
      .finalMessage();
    assert.equal(final.stop_reason, 'tool_use');
    assert.deepEqual(final.content, [
      { type: 'text', text: 'Looking it up' },
      { type: 'tool_use', id: 'tooluse_1', name: 'get_weather', input: { city: 'Paris', days: 3 } },
    ]);
    const sent = bedrock.requests.at(-1)!.body as { toolConfig: unknown };
    assert.deepEqual(sent.toolConfig, {
      tools: [
        {
          toolSpec: {
            name: 'get_weather',
            description: 'weather',
            inputSchema: { json: { type: 'object', properties: {} } },
          },
        },
      ],
      toolChoice: { any: {} },
    });
  });

  it('ends a stream that breaks mid-way with Anthropic’s error event', async () => {
    bedrock.reply = { text: 'one two three four' };
    bedrock.fault = { kind: 'exception', afterEvents: 2, exceptionType: 'modelStreamErrorException', message: 'boom' };
    try {
      const res = await postJson(`${stack.api}/v1/messages`, ask({ stream: true }));
      const sse = await res.text();
      assert.equal(eventNames(sse).at(-1), 'error');
      assert.match(sse, /event: error\ndata: \{"type":"error","error":\{"type":"api_error","message":"boom"\}\}\n\n$/);
      assert.ok(!sse.includes('[DONE]'));
    } finally {
      bedrock.fault = undefined;
    }
  });

  it('answers a provider failure before the first byte as an Anthropic error', async () => {
    bedrock.fault = { kind: 'error', status: 429, errorType: 'ThrottlingException', message: 'Too many requests' };
    try {
      const res = await postJson(`${stack.api}/v1/messages`, ask());
      assert.ok(res.status >= 500, `status ${res.status}`);
      const body = (await res.json()) as { type: string; error: { type: string; message: string } };
      assert.equal(body.type, 'error');
      assert.match(body.error.type, /^(api_error|overloaded_error)$/);
      assert.match(body.error.message, /ThrottlingException|Too many requests/);
    } finally {
      bedrock.fault = undefined;
    }
  });

  it('gives back a request Converse cannot take as a 400 invalid_request_error', async () => {
    const res = await postJson(
      `${stack.api}/v1/messages`,
      ask({ messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'text', data: 'x' } }] }] }),
    );
    assert.equal(res.status, 400);
    const body = (await res.json()) as { type: string; error: { type: string; message: string } };
    assert.equal(body.type, 'error');
    assert.equal(body.error.type, 'invalid_request_error');
    assert.match(body.error.message, /document/);
  });

  it('keeps a request whose data may not leave at home: Bedrock never sees it', async () => {
    const before = bedrock.requests.length;
    const res = await postJson(
      `${stack.api}/v1/messages`,
      ask({ system: 'Reply to jane.doe@example.com about her order', messages: [{ role: 'user', content: 'Hi' }] }),
    );
    await res.arrayBuffer();
    assert.notEqual(res.headers.get('x-kinference-route'), 'overflow/bedrock');
    assert.equal(bedrock.requests.length, before);
  });
});

describe('/v1/messages overflow to an Anthropic-compatible provider', () => {
  let stack: Stack;
  let claude: AnthropicStandin;
  let client: Anthropic;
  before(async () => {
    process.env.KINFERENCE_TEST_ANTHROPIC_KEY = API_KEY;
    claude = await startAnthropicStandin({ apiKey: API_KEY });
    stack = await startStack({
      config: {
        providers: [
          {
            name: 'claude',
            kind: 'anthropic',
            endpoint: claude.url,
            models: { [MODEL]: 'claude-sonnet-4-5' },
            apiKey: { env: 'KINFERENCE_TEST_ANTHROPIC_KEY' },
            timeout: '2s',
          },
        ],
        policies: overflowTo(['claude']),
      },
    });
    client = new Anthropic({ baseURL: stack.api, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    await stack.close();
    await claude.close();
  });

  it('sends x-api-key and anthropic-version with the provider’s model id, and answers whole', async () => {
    claude.reply = { text: 'Hi there' };
    const { data, response } = await client.messages.create(ask()).withResponse();
    assert.equal(response.headers.get('x-kinference-route'), 'overflow/claude');
    assert.deepEqual(data.content, [{ type: 'text', text: 'Hi there' }]);
    const sent = claude.requests.at(-1)!;
    assert.equal(sent.headers['x-api-key'], API_KEY);
    assert.equal(sent.headers['anthropic-version'], '2023-06-01');
    assert.equal(sent.headers.authorization, undefined);
    assert.equal(sent.body.model, 'claude-sonnet-4-5');
  });

  it('forwards the client’s anthropic-beta features, and drops a malformed value', async () => {
    claude.reply = { text: 'ok' };
    const betas = 'prompt-caching-2024-07-31, output-128k-2025-02-19';
    await client.messages.create(ask(), { headers: { 'anthropic-beta': betas } });
    assert.equal(claude.requests.at(-1)!.headers['anthropic-beta'], betas);
    await client.messages.create(ask(), { headers: { 'anthropic-beta': 'a"b; x=1' } });
    assert.equal(claude.requests.at(-1)!.headers['anthropic-beta'], undefined);
  });

  it('passes the event stream through byte for byte', async () => {
    claude.reply = { text: 'a b c', toolUse: { id: 'toolu_1', name: 'f', input: { q: 1 } } };
    const res = await postJson(`${stack.api}/v1/messages`, ask({ stream: true }));
    assert.equal(res.status, 200);
    assert.equal(await res.text(), claude.lastStream);
    const final = await client.messages.stream(ask()).finalMessage();
    assert.equal(final.stop_reason, 'tool_use');
    assert.deepEqual(final.content.at(-1), { type: 'tool_use', id: 'toolu_1', name: 'f', input: { q: 1 } });
  });

  it('ends a stream cut inside an event with Anthropic’s error event, never half an event', async () => {
    claude.reply = { text: 'one two three four five' };
    claude.fault = { kind: 'truncate', atEvent: 4 };
    try {
      const res = await postJson(`${stack.api}/v1/messages`, ask({ stream: true }));
      const sse = await res.text();
      const events = sse.split('\n\n').filter((e) => e !== '');
      assert.ok(
        events.every((e) => /^event: \S+\ndata: \{.*\}$/s.test(e)),
        sse,
      );
      assert.equal(eventNames(sse).at(-1), 'error');
      assert.equal(eventNames(sse).length, 5);
    } finally {
      claude.fault = undefined;
    }
  });

  it('relays a request the provider rejects in its own words; hides what it says of the key', async () => {
    claude.fault = { kind: 'error', status: 400, type: 'invalid_request_error', message: 'messages.0: bad block' };
    try {
      const bad = await postJson(`${stack.api}/v1/messages`, ask());
      assert.equal(bad.status, 400);
      assert.deepEqual(await bad.json(), {
        type: 'error',
        error: { type: 'invalid_request_error', message: 'messages.0: bad block' },
      });
      claude.fault = { kind: 'error', status: 401, type: 'authentication_error', message: `bad key ${API_KEY}` };
      const denied = await postJson(`${stack.api}/v1/messages`, ask());
      const text = await denied.text();
      assert.ok(!text.includes(API_KEY));
      const body = JSON.parse(text) as { type: string; error: { message: string } };
      assert.equal(body.type, 'error');
      assert.match(body.error.message, /provider claude/);
    } finally {
      claude.fault = undefined;
    }
  });

  it('keeps a request whose data may not leave at home', async () => {
    const before = claude.requests.length;
    const res = await postJson(
      `${stack.api}/v1/messages`,
      ask({ messages: [{ role: 'user', content: [{ type: 'text', text: 'my card is 4111 1111 1111 1111' }] }] }),
    );
    await res.arrayBuffer();
    assert.notEqual(res.headers.get('x-kinference-route'), 'overflow/claude');
    assert.equal(claude.requests.length, before);
  });
});

describe('Messages and the other provider kinds', () => {
  it('an OpenAI-compatible provider refuses Messages requests and says what to use instead', () => {
    const openai = createOpenAIProvider({
      name: 'hosted',
      kind: 'openai',
      endpoint: 'http://127.0.0.1:9/v1',
      models: { [MODEL]: 'gpt' },
      timeoutMs: 1000,
    });
    assert.equal(openai.supports('messages', MODEL), false);
    assert.equal(openai.supports('chat', MODEL), true);
    assert.match(openai.refusal!('messages')!, /does not take Anthropic Messages requests: .*kind anthropic/);
    assert.equal(openai.refusal!('chat'), undefined);
    void openai.close();
  });

  it('a policy whose only providers refuse Messages says why, rather than "may overflow"', () => {
    const overflow = new Overflow({
      limits: { maxBodyBytes: 1 << 20, idleTimeoutMs: 1000 },
      now: () => 0,
      providerRequests: { inc: () => {} },
      log: () => {},
    });
    overflow.setProviders([
      {
        name: 'hosted',
        kind: 'openai',
        endpoint: 'http://127.0.0.1:9/v1',
        models: { [MODEL]: 'gpt' },
        timeoutMs: 1000,
      },
    ]);
    const settings = settingsFromObject({
      node: 'n',
      listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0' },
      pods: [{ name: 'p', namespace: 'ns', address: '127.0.0.1:9', engine: 'vllm', models: [MODEL] }],
      providers: [{ name: 'claude', kind: 'anthropic', models: { [MODEL]: 'claude' }, anthropicVersion: '2023-06-01' }],
    });
    assert.equal(settings.providers[0].kind, 'anthropic');
    const policy = { ...BUILTIN_DEFAULT, overflow: { providers: ['hosted'], denyTags: [], denyTenants: [] } };
    const verdict = overflow.leaveVerdict(policy, {
      kind: 'messages',
      model: MODEL,
      tenant: 't',
      namespace: 'ns',
      tags: [],
      promptTokens: 10,
      stream: false,
    });
    assert.equal(verdict.allowed, false);
    assert.match(verdict.reason, /does not take Anthropic Messages/);
    void overflow.close();
  });

  it('a Converse stream without usage after messageStop still ends with message_delta and message_stop', () => {
    const t = new MessagesStreamTranslator({ id: 'msg_1', model: 'm' });
    const out = [
      ...t.event({ type: 'event', eventType: 'messageStart', payload: { role: 'assistant' } }),
      ...t.event({
        type: 'event',
        eventType: 'contentBlockDelta',
        payload: { contentBlockIndex: 0, delta: { text: 'x' } },
      }),
      ...t.event({ type: 'event', eventType: 'messageStop', payload: { stopReason: 'max_tokens' } }),
      ...t.end(),
    ].join('');
    assert.deepEqual(eventNames(out), [
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    assert.match(out, /"stop_reason":"max_tokens"/);
    assert.ok(t.done && !t.failed);
    const cut = new MessagesStreamTranslator({ id: 'msg_2', model: 'm' });
    cut.event({ type: 'event', eventType: 'messageStart', payload: {} });
    assert.equal(eventNames(cut.end().join('')).join(), 'error');
  });

  it("settles an overflow budget with an Anthropic stream's input tokens (message_start) and output tokens (message_delta)", () => {
    const sse = streamEvents('m', { text: 'a b', usage: { input_tokens: 11, output_tokens: 5 } })
      .map(([event, data]) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`)
      .join('');
    assert.equal(usedTokens(Buffer.from(sse), true), 16);
    const openai =
      'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}\n\ndata: [DONE]\n\n';
    assert.equal(usedTokens(Buffer.from(openai), true), 10);
  });
});
