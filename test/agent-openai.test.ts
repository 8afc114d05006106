// The agent as an app sees it: the official OpenAI client, unchanged, pointed at the agent.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { MODEL, startStack, type Stack } from './helpers/stack.ts';

describe('OpenAI-compatible API through the agent', () => {
  let stack: Stack;
  let client: OpenAI;
  before(async () => {
    stack = await startStack({ pods: [{}, {}] });
    client = new OpenAI({ baseURL: `${stack.api}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => stack.close());

  it('answers a chat completion and says which pod served it', async () => {
    const { data, response } = await client.chat.completions
      .create({ model: MODEL, messages: [{ role: 'user', content: 'Say hi' }], max_tokens: 5 })
      .withResponse();
    assert.equal(data.object, 'chat.completion');
    assert.equal(data.choices[0].finish_reason, 'length');
    assert.equal(data.usage?.completion_tokens, 5);
    assert.match(response.headers.get('x-kinference-route') ?? '', /^local\/pod-[01]$/);
    assert.match(response.headers.get('x-kinference-predicted-ttft-ms') ?? '', /^\d+$/);
  });

  it('streams a chat completion chunk by chunk, with the usage chunk last', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Count' }],
      max_tokens: 6,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
    assert.ok(text.length > 0);
    const last = chunks.at(-1)!;
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage?.completion_tokens, 6);
  });

  it('answers completions and embeddings', async () => {
    const completion = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 4 });
    assert.equal(completion.object, 'text_completion');
    assert.equal(completion.usage?.completion_tokens, 4);
    const embedding = await client.embeddings.create({ model: MODEL, input: ['a', 'b'] });
    assert.equal(embedding.data.length, 2);
    assert.ok(embedding.data[0].embedding.length > 0);
  });

  it('lists the models the cluster serves', async () => {
    const models = [];
    for await (const model of client.models.list()) models.push(model.id);
    assert.deepEqual(models, [MODEL]);
  });

  it('turns an unknown model into the OpenAI 404 the client understands', async () => {
    await assert.rejects(
      client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }),
      (error: unknown) => error instanceof OpenAI.NotFoundError && /does not exist/.test(error.message),
    );
  });
});
