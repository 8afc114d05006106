// POST /v1/messages (the Anthropic Messages API) through the agent to a pod that speaks it, as vLLM
// does: classified, predicted and routed like chat, the named-event stream relayed as it came, and
// the agent's own errors in Anthropic's shape. Overflow: test/anthropic-overflow.test.ts.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { vllmPage } from './fixtures/scripted-pod.ts';
import { MODEL, postJson, startStack, type Stack } from './helpers/stack.ts';

const STREAM = [
  [
    'message_start',
    {
      type: 'message_start',
      message: {
        id: 'msg_1',
        type: 'message',
        role: 'assistant',
        model: MODEL,
        content: [],
        stop_reason: null,
        usage: { input_tokens: 9, output_tokens: 1 },
      },
    },
  ],
  ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }],
  ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hello' } }],
  ['content_block_stop', { type: 'content_block_stop', index: 0 }],
  [
    'message_delta',
    { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 2 } },
  ],
  ['message_stop', { type: 'message_stop' }],
] as const;
const SSE = STREAM.map(([event, data]) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`).join('');

describe('POST /v1/messages', () => {
  let pod: Server;
  let stack: Stack;
  const paths: string[] = [];

  before(async () => {
    pod = createServer((req, res) => {
      if (req.url === '/metrics') return void res.end(vllmPage(MODEL, '0', '0'));
      let body = '';
      req.on('data', (c: Buffer) => (body += c));
      req.on('end', () => {
        if (req.method !== 'POST') return void res.end();
        paths.push(req.url ?? '');
        if ((JSON.parse(body || '{}') as { stream?: boolean }).stream) {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          return void res.end(SSE);
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            id: 'msg_2',
            type: 'message',
            role: 'assistant',
            content: [{ type: 'text', text: 'Hi' }],
            stop_reason: 'end_turn',
          }),
        );
      });
    });
    await new Promise<void>((resolve) => pod.listen(0, '127.0.0.1', resolve));
    stack = await startStack({
      pods: [],
      extraPods: [{ name: 'anthropic-pod', address: `127.0.0.1:${(pod.address() as AddressInfo).port}` }],
    });
  });
  after(async () => {
    await stack?.close();
    pod?.close();
  });

  const messages = (extra: Record<string, unknown> = {}) => ({
    model: MODEL,
    max_tokens: 16,
    messages: [{ role: 'user', content: 'Hello there' }],
    ...extra,
  });

  it("routes to a pod's /v1/messages and relays the named-event stream as it came", async () => {
    const res = await postJson(`${stack.api}/v1/messages`, messages({ stream: true }));
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('x-kinference-route'), 'local/anthropic-pod');
    assert.equal(await res.text(), SSE);
    assert.equal(paths.at(-1), '/v1/messages');
  });

  it('answers a non-streamed request whole', async () => {
    const res = await postJson(`${stack.api}/v1/messages`, messages());
    assert.equal(res.status, 200);
    assert.equal(((await res.json()) as { type: string }).type, 'message');
  });

  it('answers a bad request and an unknown model in the Anthropic error shape', async () => {
    const bad = await postJson(`${stack.api}/v1/messages`, {
      model: MODEL,
      messages: [{ role: 'user', content: 'x' }],
    });
    assert.equal(bad.status, 400);
    const body = (await bad.json()) as { type: string; error: { type: string; message: string } };
    assert.equal(body.type, 'error');
    assert.equal(body.error.type, 'invalid_request_error');
    assert.match(body.error.message, /max_tokens/);
    const unknown = await postJson(`${stack.api}/v1/messages`, messages({ model: 'no-such-model' }));
    assert.equal(unknown.status, 404);
    assert.equal(((await unknown.json()) as { error: { type: string } }).error.type, 'not_found_error');
  });
});
