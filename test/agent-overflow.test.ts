// Overflow by policy: only when no pod can answer in time, in the listed order, never with data
// that may not leave, and back to the GPUs as soon as a pod drains.
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { refusedPort, startOpenAIStandin, type OpenAIStandin } from './fixtures/openai-provider.ts';
import { chatBody, MODEL, postJson, startStack, waitFor, type Stack, openaiProvider } from './helpers/stack.ts';

const KEY_ENV = 'KINFERENCE_TEST_PROVIDER_KEY';
const SECRET = 'sk-test-secret-value-123';

describe('overflow to hosted providers', () => {
  let stack: Stack;
  let first: OpenAIStandin;
  let second: OpenAIStandin;
  let refused: number;

  before(async () => {
    process.env[KEY_ENV] = SECRET;
    first = await startOpenAIStandin({ apiKey: SECRET });
    second = await startOpenAIStandin({ apiKey: SECRET });
    refused = await refusedPort();
    const provider = (name: string, url: string) => openaiProvider(name, url, KEY_ENV);
    stack = await startStack({
      pods: [{ maxSeqs: 2 }, { maxSeqs: 2 }],
      config: {
        providers: [
          provider('first', first.url),
          provider('second', second.url),
          provider('down', `http://127.0.0.1:${refused}/v1`),
        ],
        policies: [
          // Everyone: a generous SLO, bypass a pod whose queue averaged over 2 in the last second.
          {
            metadata: { name: 'default', namespace: '*' },
            spec: {
              slo: { ttft: '5s' },
              exclude: [{ metric: 'queued', above: 2, window: '1s' }],
              overflow: { providers: ['first', 'second'], deny: { tags: ['pii'] } },
              wait: { max: '300ms' },
            },
          },
          // Tenant "strict": no pod can ever meet a 1 ms SLO, so every request is an overflow candidate.
          {
            metadata: { name: 'strict', namespace: 'strict' },
            spec: {
              slo: { ttft: '1ms' },
              exclude: [],
              overflow: { providers: ['first', 'second'], deny: { tags: ['pii', 'unscanned'], tenants: ['blocked'] } },
              wait: { max: '300ms' },
            },
          },
          {
            metadata: { name: 'dead-first', namespace: 'dead' },
            spec: { slo: { ttft: '1ms' }, overflow: { providers: ['down', 'second'] }, wait: { max: '300ms' } },
          },
        ],
        namespaces: { blocked: { 'kinference.io/policy': 'strict/strict' } },
      },
    });
  });
  after(async () => {
    await stack.close();
    await first.close();
    await second.close();
  });
  beforeEach(() => {
    first.fault = undefined;
    second.fault = undefined;
  });

  const send = (
    tenant: string,
    body = chatBody('What is the capital of France?'),
    headers: Record<string, string> = {},
  ) => postJson(`${stack.api}/v1/chat/completions`, body, { 'x-kinference-tenant': tenant, ...headers });

  it('overflows only when no pod qualifies, and returns to the pods once they drain', async () => {
    const calm = await send('team-a');
    assert.match(calm.headers.get('x-kinference-route') ?? '', /^local\//);
    await calm.arrayBuffer();

    // Traffic the agent never sees fills both pods' queues.
    const held = stack.sims.flatMap((sim) =>
      Array.from({ length: 6 }, () => sim.engine.submit({ promptTokens: 50, maxTokens: 100_000 })),
    );
    // Once the queues have averaged over 2 for long enough, no pod qualifies: the agent says so.
    await waitFor(
      async () => {
        const e = (await (await fetch(`${stack.admin}/explain?model=${MODEL}&tenant=team-a`)).json()) as {
          action: string;
          dropped: { reason: string }[];
        };
        return e.action === 'overflow' && e.dropped.length === 2 && e.dropped.every((d) => d.reason === 'excluded');
      },
      3000,
      'both pods to be excluded',
    );
    const before = first.requests.length;
    const busy = await send('team-a');
    assert.equal(busy.status, 200);
    assert.equal(busy.headers.get('x-kinference-route'), 'overflow/first');
    await busy.json();
    const sent = first.requests.at(-1)!;
    assert.equal(first.requests.length, before + 1);
    assert.equal(sent.body.model, 'first-llama');
    assert.equal(sent.headers.authorization, `Bearer ${SECRET}`);

    for (const h of held) if (h.accepted) h.seq.abort();
    await waitFor(
      async () => {
        const r = await send('team-a');
        await r.arrayBuffer();
        return (r.headers.get('x-kinference-route') ?? '').startsWith('local/');
      },
      5000,
      'requests to land on the pods again',
    );
  });

  it('tries providers in order: the next one on 503, 429 and malformed answers', async () => {
    for (const fault of [
      { kind: 'status', status: 503 },
      { kind: 'status', status: 429 },
      { kind: 'malformed' },
    ] as const) {
      first.fault = fault;
      const response = await send('strict');
      assert.equal(response.status, 200, JSON.stringify(fault));
      assert.equal(response.headers.get('x-kinference-route'), 'overflow/second');
      await response.arrayBuffer();
      first.fault = undefined;
      // Let the breaker see successes so the next case starts closed.
      for (let i = 0; i < 3; i++) await (await send('strict')).arrayBuffer();
    }
  });

  it('skips a refused provider for a cool-down instead of paying for it on every request', async () => {
    for (let i = 0; i < 5; i++) {
      const response = await send('dead');
      assert.equal(response.headers.get('x-kinference-route'), 'overflow/second');
      await response.arrayBuffer();
    }
    const metrics = await (await fetch(`${stack.admin}/metrics`)).text();
    // Three refusals open its circuit; the next two requests go straight to the second provider.
    assert.match(metrics, /kinference_provider_requests_total\{provider="down",outcome="failed"\} 3\n/);
    const state = (await (await fetch(`${stack.admin}/debug/state`)).json()) as {
      providers: { name: string; breaker: { state: string } }[];
    };
    assert.equal(state.providers.find((p) => p.name === 'down')?.breaker.state, 'open');
  });

  it('503 with Retry-After when every provider is down, 502 when they answer garbage; the agent stays up', async () => {
    first.fault = { kind: 'status', status: 500 };
    second.fault = { kind: 'malformed' };
    const bad = await send('strict');
    assert.equal(bad.status, 502);
    assert.equal(bad.headers.get('x-kinference-route'), 'rejected');
    assert.ok(bad.headers.get('retry-after'));
    const body = (await bad.json()) as { error: { message: string } };
    assert.doesNotMatch(body.error.message, new RegExp(SECRET));
    first.fault = undefined;
    second.fault = undefined;
    const fine = await send('team-a');
    assert.equal(fine.status, 200);
    await fine.arrayBuffer();
  });

  it('never sends a prompt with PII off the cluster, even when no pod can take it: 429 after wait.max', async () => {
    const marker = 'marker-4711';
    const requestsBefore = first.requests.length + second.requests.length;
    const started = Date.now();
    const found = await send('strict', chatBody(`${marker}: mail jane.doe@example.com the results`));
    assert.equal(found.status, 429);
    assert.ok(Date.now() - started >= 250, 'waited for a pod first');
    assert.equal(found.headers.get('x-kinference-route'), 'rejected');
    assert.match(found.headers.get('retry-after') ?? '', /^\d+$/);
    const error = (await found.json()) as { error: { message: string } };
    assert.match(error.error.message, /tag pii may not leave/);

    const tagged = await send('strict', chatBody(`${marker}: nothing sensitive here`), { 'x-kinference-tags': 'PII' });
    assert.equal(tagged.status, 429);
    await tagged.arrayBuffer();
    // A header cannot take away what a detector found.
    const untag = await send('strict', chatBody(`${marker}: card 4111 1111 1111 1111`), { 'x-kinference-tags': '' });
    assert.equal(untag.status, 429);
    await untag.arrayBuffer();

    assert.equal(first.requests.length + second.requests.length, requestsBefore);
    for (const r of [...first.requests, ...second.requests])
      assert.doesNotMatch(JSON.stringify(r.body), new RegExp(marker));
  });

  it('never sends a denied tenant off the cluster', async () => {
    const before = first.requests.length + second.requests.length;
    const response = await send('blocked');
    assert.equal(response.status, 429);
    const error = (await response.json()) as { error: { message: string } };
    assert.match(error.error.message, /tenant blocked may not leave/);
    assert.equal(first.requests.length + second.requests.length, before);
  });

  it('streams an overflowed answer and ends a broken provider stream with an error event', async () => {
    const ok = await send('strict', chatBody('hi', { stream: true }));
    assert.equal(ok.headers.get('x-kinference-route'), 'overflow/first');
    assert.match(await ok.text(), /data: \[DONE\]\n\n$/);
    first.fault = { kind: 'break', afterChunks: 2 };
    const broken = await send('strict', chatBody('hi', { stream: true }));
    assert.equal(broken.status, 200);
    const frames = (await broken.text()).trim().split('\n\n');
    assert.equal(frames.at(-1), 'data: [DONE]');
    assert.match(frames.at(-2)!, /"error"/);
  });

  it('explains why a request overflows or stays', async () => {
    const strict = (await (await fetch(`${stack.admin}/explain?model=${MODEL}&tenant=strict`)).json()) as {
      action: string;
      dropped: { reason: string }[];
    };
    assert.equal(strict.action, 'overflow');
    assert.ok(
      strict.dropped.every((d) => d.reason === 'over-slo'),
      JSON.stringify(strict.dropped),
    );
    const pii = (await (await fetch(`${stack.admin}/explain?model=${MODEL}&tenant=strict&tags=pii`)).json()) as {
      action: string;
      leave: { reason: string };
    };
    assert.equal(pii.action, 'wait');
    assert.match(pii.leave.reason, /pii/);
  });
});
