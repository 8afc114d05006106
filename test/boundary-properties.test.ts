// The data boundary as a property, end to end: for every family of forms a sensitive value takes
// in ordinary traffic (headers, seams, other scripts' digits, invisible characters, escapes,
// URL/HTML/base64 encodings), many generated requests carrying a canary go through a running agent
// whose pool cannot meet the SLO and whose policy lets clean data overflow to a provider stand-in
// on loopback. None may reach the provider; the clean twin of each (same shape, the value broken)
// must. A header outside the off-cluster allow-list never reaches the provider at all.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startOpenAIStandin, type OpenAIStandin } from './fixtures/openai-provider.ts';
import { FAMILIES, samples, type Sample } from './fixtures/canaries.ts';
import { classifyRequest } from '../agent/classify/classify.ts';
import { propagatedHeaders, requestIdFor } from '../agent/forward/headers.ts';
import { openaiProvider, postJson, startStack, type Stack } from './helpers/stack.ts';

const KEY_ENV = 'KINFERENCE_TEST_BOUNDARY_PROPERTY_KEY';
/** Requests per family and polarity through the agent; the pure property below takes many more. */
const END_TO_END = 24;
const PURE = 400;
const PATHS = { chat: '/v1/chat/completions', responses: '/v1/responses' } as const;

/** Runs `work` over `items`, `width` at a time. */
async function inBatches<T>(items: readonly T[], width: number, work: (item: T) => Promise<void>): Promise<void> {
  for (let i = 0; i < items.length; i += width) await Promise.all(items.slice(i, i + width).map(work));
}

describe('no canary reaches a provider, in any form ordinary traffic carries it', () => {
  let provider: OpenAIStandin;
  let stack: Stack;

  before(async () => {
    process.env[KEY_ENV] = 'sk-property';
    provider = await startOpenAIStandin({ apiKey: 'sk-property' });
    stack = await startStack({
      pods: [{ speed: 50 }],
      config: {
        providers: [openaiProvider('hosted', provider.url, KEY_ENV)],
        // Bodies of 16 KiB and more are judged on a worker thread: one test below sends one.
        limits: { offloadBodyBytes: 16 * 1024 },
        // No pod can meet 1 ms: every request that may leave does; the rest is served at home.
        policies: [
          {
            metadata: { name: 'default', namespace: '*' },
            spec: { slo: { ttft: '1ms' }, exclude: [], overflow: { providers: ['hosted'] }, wait: { max: '1ms' } },
          },
        ],
      },
    });
  });
  after(async () => {
    await stack?.close();
    await provider?.close();
  });

  const send = async (sample: Sample) => {
    const response = await postJson(`${stack.api}${PATHS[sample.kind]}`, sample.body, sample.headers);
    await response.arrayBuffer();
    return response;
  };

  for (const [index, family] of FAMILIES.entries()) {
    it(`${family.name}: ${END_TO_END} canaries stay home, their clean twins overflow`, async () => {
      const cases = samples(family, END_TO_END, 1000 * (index + 1));
      const before = provider.requests.length;
      const leaked: string[] = [];
      await inBatches(cases, 6, async ({ leaky }) => {
        const response = await send(leaky);
        const route = response.headers.get('x-kinference-route') ?? '';
        if (family.promise === 'kept' && route.startsWith('overflow/'))
          leaked.push(`${JSON.stringify(leaky.headers)} ${JSON.stringify(leaky.body)}`);
      });
      assert.deepEqual(leaked, [], 'canaries that reached the provider');
      if (family.promise === 'kept') assert.equal(provider.requests.length, before, 'the provider saw no request');
      else {
        // The value sat in a header that is not on the allow-list: the request leaves, the header does not.
        const sent = provider.requests.slice(before);
        assert.equal(sent.length, END_TO_END);
        for (const [i, r] of sent.entries()) {
          const extra = Object.keys(r.headers).filter((h) =>
            ['baggage', 'x-user-email', 'x-customer', 'x-forwarded-user', 'from'].includes(h),
          );
          assert.deepEqual(extra, [], `request ${i} carried ${extra.join(', ')}`);
        }
      }

      const overflowed = provider.requests.length;
      let stayed = 0;
      await inBatches(cases, 6, async ({ clean }) => {
        const response = await send(clean);
        if (response.headers.get('x-kinference-route') !== 'overflow/hosted') stayed++;
      });
      assert.equal(stayed, 0, 'clean twins kept home');
      assert.equal(provider.requests.length, overflowed + END_TO_END);
    });
  }

  it('classifies the forwarded headers of a body judged on a worker thread too', async () => {
    const before = provider.requests.length;
    const body = { model: 'llama-3-8b', messages: [{ role: 'user', content: 'a long document. '.repeat(1200) }] };
    const kept = await send({ kind: 'chat', body, headers: { 'x-request-id': 'jane.doe@example.com' } });
    assert.notEqual(kept.headers.get('x-kinference-route'), 'overflow/hosted');
    assert.equal(provider.requests.length, before);
    const left = await send({ kind: 'chat', body, headers: { 'x-request-id': 'req-42' } });
    assert.equal(left.headers.get('x-kinference-route'), 'overflow/hosted');
    assert.equal(provider.requests.length, before + 1);
  });

  it('sends a provider only the allow-listed headers, and a URL built from configuration alone', async () => {
    const before = provider.requests.length;
    const response = await send({
      kind: 'chat',
      body: { model: 'llama-3-8b', messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 4 },
      headers: {
        'x-request-id': 'req-123',
        traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
        tracestate: 'congo=t61rcWkgMzE',
        baggage: 'tenant=blue',
        cookie: 'session=abc',
        'x-forwarded-for': '10.1.2.3',
        'x-kinference-tags': 'internal',
      },
    });
    assert.equal(response.headers.get('x-kinference-route'), 'overflow/hosted');
    const sent = provider.requests[before];
    assert.equal(sent.path, '/v1/chat/completions');
    assert.deepEqual(sent.query, {});
    const clientHeaders = Object.keys(sent.headers).filter(
      (h) =>
        ![
          'host',
          'connection',
          'content-length',
          'content-type',
          'accept',
          'authorization',
          'user-agent',
          'accept-encoding',
          'accept-language',
          'sec-fetch-mode',
        ].includes(h),
    );
    assert.deepEqual(clientHeaders.sort(), ['traceparent', 'tracestate', 'x-request-id']);
  });
});

describe('the classifier, on many more instances of each family', () => {
  for (const [index, family] of FAMILIES.entries()) {
    if (family.promise !== 'kept') continue;
    it(`${family.name}: ${PURE} of ${PURE} tagged pii, no clean twin tagged`, () => {
      const missed: string[] = [];
      const twins: string[] = [];
      for (const { leaky, clean } of samples(family, PURE, 500_000 + 1000 * index)) {
        if (!tagsOf(leaky).includes('pii')) missed.push(JSON.stringify(leaky));
        if (tagsOf(clean).includes('pii')) twins.push(JSON.stringify(clean));
      }
      assert.deepEqual(missed.slice(0, 5), [], `${missed.length} missed`);
      assert.deepEqual(twins.slice(0, 5), [], `${twins.length} twins tagged`);
    });
  }
});

/** Tags as the request path computes them: the body, and the header values it would forward. */
function tagsOf(sample: Sample): string[] {
  const client = { get: (name: string) => sample.headers[name] ?? null };
  const forwarded = propagatedHeaders(
    client,
    requestIdFor(client.get('x-request-id'), () => 'generated'),
  );
  return classifyRequest(null, sample.body, { headers: forwarded }).tags;
}
