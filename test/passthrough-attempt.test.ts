// Passthrough routes go through the same pod send as inference (agent/server/request-path/pod-send.ts): a
// pod's answer is read up to limits.maxUpstreamBodyBytes like any other (a 502 past it, not a
// cap of their own), and a pod that fails before its first byte is marked like any other.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { MODEL, postJson, startStack, type Stack } from './helpers/stack.ts';

describe('passthrough through the inference pod send', () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack({ config: { limits: { maxUpstreamBodyBytes: 1024 } } });
  });
  after(() => stack.close());

  it('answers within the limit as the pod did', async () => {
    const res = await postJson(`${stack.api}/tokenize`, { model: MODEL, prompt: 'hello there' });
    assert.equal(res.status, 200);
    const body = (await res.json()) as { count: number; tokens: number[] };
    assert.equal(body.count, body.tokens.length);
  });

  it('answers 502 for a pod answer over limits.maxUpstreamBodyBytes, as inference does', async () => {
    // Large enough to span several chunks (the limit is checked as chunks arrive).
    const prompt = 'many words in a prompt '.repeat(20_000);
    const res = await postJson(`${stack.api}/tokenize`, { model: MODEL, prompt });
    assert.equal(res.status, 502);
    const body = (await res.json()) as { error: { code: string } };
    assert.equal(body.error.code, 'upstream_failed');
    assert.match(res.headers.get('x-kinference-route') ?? '', /^local\//);
  });
});
