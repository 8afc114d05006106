// Overflow through Bedrock end to end: an OpenAI client's chat reaches the Bedrock stand-in as a
// SigV4-signed Converse call (verified by the stand-in), and comes back in OpenAI's shape,
// streamed from the binary event stream.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startBedrockStandin, type BedrockStandin } from './fixtures/bedrock-standin.ts';
import { MODEL, startStack, type Stack } from './helpers/stack.ts';

const CREDENTIALS = { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY' };
const MODEL_ID = 'meta.llama3-1-8b-instruct-v1:0';

describe('overflow to Bedrock', () => {
  let stack: Stack;
  let bedrock: BedrockStandin;
  let client: OpenAI;
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
            models: { [MODEL]: MODEL_ID },
            credentials: {
              accessKeyId: { env: 'KINFERENCE_TEST_AWS_KEY_ID' },
              secretAccessKey: { env: 'KINFERENCE_TEST_AWS_SECRET' },
            },
          },
        ],
        // No pod can meet 1 ms: every request overflows.
        policies: [
          {
            metadata: { name: 'default', namespace: '*' },
            spec: { slo: { ttft: '1ms' }, exclude: [], overflow: { providers: ['bedrock'] } },
          },
        ],
      },
    });
    client = new OpenAI({ baseURL: `${stack.api}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    await stack.close();
    await bedrock.close();
  });

  it('answers a chat through a signed Converse call', async () => {
    const { data, response } = await client.chat.completions
      .create({
        model: MODEL,
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'Hello' },
        ],
        max_tokens: 20,
      })
      .withResponse();
    assert.equal(response.headers.get('x-kinference-route'), 'overflow/bedrock');
    assert.equal(data.object, 'chat.completion');
    assert.ok((data.choices[0].message.content ?? '').length > 0);
    const sent = bedrock.requests.at(-1)!;
    assert.equal(sent.auth, 'sigv4');
    assert.equal(sent.operation, 'converse');
    assert.equal(sent.modelId, MODEL_ID);
    assert.deepEqual(sent.body.system, [{ text: 'Be brief.' }]);
  });

  it('streams ConverseStream events as OpenAI chunks, usage last', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Hello' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.ok(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('').length > 0);
    assert.ok(chunks.some((c) => c.choices[0]?.finish_reason === 'stop'));
    assert.deepEqual(chunks.at(-1)!.choices, []);
    assert.ok((chunks.at(-1)!.usage?.total_tokens ?? 0) > 0);
    assert.equal(bedrock.requests.at(-1)!.operation, 'converse-stream');
  });
});
