import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { BreakerSet, CircuitBreaker } from '../agent/providers/breaker.ts';
import { tryProviders, type Attempt } from '../agent/providers/chain.ts';
import { createProvider } from '../agent/providers/index.ts';
import { createOpenAIProvider } from '../agent/providers/openai.ts';
import type { ClosableProvider } from '../agent/providers/upstream.ts';
import type { ProviderSettings } from '../agent/providers/types.ts';
import type { RequestKind } from '../agent/types.ts';
import { refusedPort, startOpenAIStandin, type OpenAIStandin } from './fixtures/openai-provider.ts';

const SECRET = 'sk-chain-secret-9d8c7b6a5f4e';
const env = { KEY: SECRET, OLD_KEY: `${SECRET}-revoked` };

function openai(name: string, endpoint: string, over: Partial<ProviderSettings> = {}): ClosableProvider {
  return createOpenAIProvider(
    {
      name,
      kind: 'openai',
      endpoint,
      models: { 'llama-3-8b': `${name}-llama` },
      apiKey: { env: 'KEY' },
      timeoutMs: 2_000,
      ...over,
    },
    { env },
  );
}

function call(kind: RequestKind = 'chat', signal = new AbortController().signal) {
  const body =
    kind === 'embeddings'
      ? { model: 'llama-3-8b', input: 'x' }
      : { model: 'llama-3-8b', messages: [{ role: 'user', content: 'hi' }] };
  return { kind, model: 'llama-3-8b', body, signal };
}

describe('circuit breaker', () => {
  test('opens after N consecutive failures, then lets one trial through after the cool-down', () => {
    const b = new CircuitBreaker({ failureThreshold: 3, coolDownMs: 10_000 });
    b.onFailure(0);
    b.onFailure(1);
    assert.equal(b.state(1), 'closed');
    assert.equal(b.allow(1), true);
    b.onFailure(2);
    assert.equal(b.state(2), 'open');
    assert.equal(b.allow(9_999), false);
    assert.equal(b.state(10_002), 'half-open');
    assert.equal(b.allow(10_002), true);
    assert.equal(b.allow(10_003), false, 'only one trial at a time');
    b.onSuccess();
    assert.equal(b.state(10_004), 'closed');
    assert.equal(b.allow(10_004), true);
  });

  test('a success in between resets the count', () => {
    const b = new CircuitBreaker();
    b.onFailure(0);
    b.onFailure(0);
    b.onSuccess();
    b.onFailure(0);
    b.onFailure(0);
    assert.equal(b.state(0), 'closed');
  });

  test('a failed trial re-opens for a fresh cool-down', () => {
    const b = new CircuitBreaker({ failureThreshold: 1, coolDownMs: 100 });
    b.onFailure(0);
    assert.equal(b.allow(100), true);
    b.onFailure(100);
    assert.equal(b.state(150), 'open');
    assert.equal(b.allow(199), false);
    assert.equal(b.allow(200), true);
  });

  test('a released or lost trial does not keep the provider shut', () => {
    const b = new CircuitBreaker({ failureThreshold: 1, coolDownMs: 100 });
    b.onFailure(0);
    assert.equal(b.allow(100), true);
    b.release();
    assert.equal(b.allow(101), true);
    assert.equal(b.allow(150), false);
    assert.equal(b.allow(201), true, 'a trial that never reported back expires after a cool-down');
  });

  test('defaults: 3 failures, 10 s', () => {
    const set = new BreakerSet();
    const b = set.get('p');
    assert.equal(set.get('p'), b);
    for (let i = 0; i < 3; i++) b.onFailure(0);
    assert.equal(b.state(9_999), 'open');
    assert.equal(b.state(10_000), 'half-open');
    assert.deepEqual(set.snapshot(0), { p: { state: 'open', consecutiveFailures: 3 } });
  });
});

describe('overflow chain', () => {
  let first: OpenAIStandin;
  let second: OpenAIStandin;
  let p1: ClosableProvider;
  let p2: ClosableProvider;
  let clock = 0;
  const now = () => clock;

  before(async () => {
    first = await startOpenAIStandin({ apiKey: SECRET, reply: 'from first' });
    second = await startOpenAIStandin({ apiKey: SECRET, reply: 'from second' });
    p1 = openai('first', first.url);
    p2 = openai('second', second.url);
  });
  after(async () => {
    await Promise.all([p1.close(), p2.close()]);
    await Promise.all([first.close(), second.close()]);
  });
  beforeEach(() => {
    for (const s of [first, second]) {
      s.requests.length = 0;
      s.fault = undefined;
    }
    clock = 0;
  });

  async function content(res: Response): Promise<string> {
    return ((await res.json()) as { choices: Array<{ message: { content: string } }> }).choices[0].message.content;
  }

  test('answers from the first provider when it is healthy, without touching the next', async () => {
    const seen: Attempt[] = [];
    const result = await tryProviders([p1, p2], call(), {
      breakers: new BreakerSet(),
      now,
      onAttempt: (a) => seen.push(a),
    });
    assert.ok(result.ok);
    assert.equal(result.provider, 'first');
    assert.equal(await content(result.response), 'from first');
    assert.equal(second.requests.length, 0);
    assert.deepEqual(seen, result.attempts);
    assert.deepEqual(
      result.attempts.map((a) => [a.provider, a.outcome, a.status]),
      [['first', 'answered', 200]],
    );
  });

  test('overflows to the next provider when the first returns 503', async () => {
    first.fault = { kind: 'status', status: 503 };
    const result = await tryProviders([p1, p2], call(), { breakers: new BreakerSet(), now });
    assert.ok(result.ok);
    assert.equal(result.provider, 'second');
    assert.equal(await content(result.response), 'from second');
    assert.deepEqual(
      result.attempts.map((a) => [a.provider, a.outcome, a.reason, a.status]),
      [
        ['first', 'failed', 'status', 503],
        ['second', 'answered', undefined, 200],
      ],
    );
  });

  test('overflows when the first is throttled (429)', async () => {
    first.fault = { kind: 'status', status: 429 };
    const result = await tryProviders([p1, p2], call(), { breakers: new BreakerSet(), now });
    assert.ok(result.ok);
    assert.equal(result.provider, 'second');
  });

  test('overflows when the first does not answer in time', async () => {
    first.fault = { kind: 'hang' };
    const slow = openai('slow', first.url, { timeoutMs: 150 });
    try {
      const result = await tryProviders([slow, p2], call(), { breakers: new BreakerSet(), now });
      assert.ok(result.ok);
      assert.equal(result.provider, 'second');
      assert.equal(result.attempts[0].reason, 'timeout');
    } finally {
      await slow.close();
    }
  });

  test('overflows when the first refuses connections', async () => {
    const dead = openai('dead', `http://127.0.0.1:${await refusedPort()}/v1`);
    try {
      const result = await tryProviders([dead, p2], call(), { breakers: new BreakerSet(), now });
      assert.ok(result.ok);
      assert.equal(result.provider, 'second');
      assert.equal(result.attempts[0].reason, 'connect');
    } finally {
      await dead.close();
    }
  });

  test('a provider that cannot take the request (400) declines: the next one is asked, and no breaker counts it', async () => {
    first.fault = {
      kind: 'status',
      status: 400,
      body: JSON.stringify({
        error: { message: 'n > 1 is not supported', type: 'invalid_request_error', param: 'n', code: null },
      }),
    };
    const breakers = new BreakerSet({ failureThreshold: 1 });
    const result = await tryProviders([p1, p2], call(), { breakers, now });
    assert.ok(result.ok);
    assert.equal(result.provider, 'second');
    assert.equal(await content(result.response), 'from second');
    assert.deepEqual(
      result.attempts.map((a) => [a.provider, a.outcome, a.status]),
      [
        ['first', 'declined', 400],
        ['second', 'answered', 200],
      ],
    );
    assert.equal(breakers.get('first').state(now()), 'closed');
  });

  test("when every provider declines, the last refusal is the answer (400, the client's), with every breaker closed", async () => {
    for (const s of [first, second])
      s.fault = {
        kind: 'status',
        status: 413,
        body: JSON.stringify({
          error: { message: 'too large for me', type: 'invalid_request_error', param: null, code: null },
        }),
      };
    const breakers = new BreakerSet({ failureThreshold: 1 });
    for (let i = 0; i < 3; i++) {
      const result = await tryProviders([p1, p2], call(), { breakers, now });
      assert.ok(result.ok);
      assert.equal(result.provider, 'second');
      assert.equal(result.response.status, 413);
      assert.match(
        ((await result.response.json()) as { error: { message: string } }).error.message,
        /too large for me/,
      );
    }
    assert.deepEqual(breakers.snapshot(now()), {
      first: { state: 'closed', consecutiveFailures: 0 },
      second: { state: 'closed', consecutiveFailures: 0 },
    });
  });

  test("an error our own side throws while sending (the request's fault) never opens a breaker", async () => {
    const breakers = new BreakerSet({ failureThreshold: 1 });
    const throwing: ClosableProvider = {
      ...p1,
      name: 'throwing',
      send: () => Promise.reject(new RangeError('Maximum call stack size exceeded')),
    };
    for (let i = 0; i < 3; i++) {
      const result = await tryProviders([throwing, p2], call(), { breakers, now });
      assert.ok(result.ok && result.provider === 'second');
      assert.deepEqual(result.attempts[0], {
        provider: 'throwing',
        outcome: 'failed',
        reason: 'error',
        message: 'provider throwing: request failed',
        ms: 0,
      });
    }
    assert.equal(breakers.get('throwing').state(now()), 'closed');
  });

  test('fails over when our own credentials are rejected, without repeating them', async () => {
    const revoked = openai('revoked', first.url, { apiKey: { env: 'OLD_KEY' } });
    try {
      const result = await tryProviders([revoked, p2], call(), { breakers: new BreakerSet(), now });
      assert.ok(result.ok);
      assert.equal(result.provider, 'second');
      assert.equal(result.attempts[0].status, 401);
      assert.ok(!JSON.stringify(result.attempts).includes(SECRET));
    } finally {
      await revoked.close();
    }
  });

  test('skips providers that do not serve the model or the kind', async () => {
    const other = createOpenAIProvider({
      name: 'other',
      kind: 'openai',
      endpoint: first.url,
      models: { 'gpt-4o': 'gpt-4o' },
      timeoutMs: 1_000,
    });
    const bedrock = createProvider(
      {
        name: 'bedrock',
        kind: 'bedrock',
        region: 'us-east-1',
        endpoint: `http://127.0.0.1:${await refusedPort()}`,
        models: { 'llama-3-8b': 'meta.llama3-1-8b-instruct-v1:0' },
        apiKey: { env: 'KEY' },
        timeoutMs: 1_000,
      },
      { env },
    );
    try {
      const result = await tryProviders([other, bedrock, p2], call('embeddings'), { breakers: new BreakerSet(), now });
      assert.ok(result.ok);
      assert.equal(result.provider, 'second');
      assert.deepEqual(
        result.attempts.map((a) => [a.provider, a.outcome, a.reason]),
        [
          ['other', 'skipped', 'unsupported'],
          ['bedrock', 'skipped', 'unsupported'],
          ['second', 'answered', undefined],
        ],
      );
    } finally {
      await other.close();
      await bedrock.close();
    }
  });

  test('reports every failure when no provider answers', async () => {
    first.fault = { kind: 'status', status: 502 };
    second.fault = { kind: 'status', status: 503 };
    const result = await tryProviders([p1, p2], call(), { breakers: new BreakerSet(), now });
    assert.equal(result.ok, false);
    assert.deepEqual(
      result.attempts.map((a) => [a.provider, a.status]),
      [
        ['first', 502],
        ['second', 503],
      ],
    );
  });

  test('stops when the client has left', async () => {
    first.fault = { kind: 'hang' };
    const ac = new AbortController();
    const breakers = new BreakerSet();
    const pending = tryProviders([p1, p2], call('chat', ac.signal), { breakers, now });
    while (first.requests.length === 0) await new Promise((r) => setTimeout(r, 2));
    ac.abort();
    const result = await pending;
    assert.equal(result.ok, false);
    assert.deepEqual(
      result.attempts.map((a) => [a.provider, a.reason]),
      [['first', 'aborted']],
    );
    assert.equal(second.requests.length, 0);
    assert.deepEqual(
      breakers.snapshot(now()),
      { first: { state: 'closed', consecutiveFailures: 0 } },
      'a client leaving is not the provider failing',
    );
  });

  test('opens the breaker after 3 failures: no request reaches the provider during the cool-down, then one trial', async () => {
    const breakers = new BreakerSet({ failureThreshold: 3, coolDownMs: 10_000 });
    first.fault = { kind: 'status', status: 503 };
    for (let i = 0; i < 3; i++) {
      const r = await tryProviders([p1, p2], call(), { breakers, now });
      assert.ok(r.ok && r.provider === 'second');
    }
    assert.equal(first.requests.length, 3);

    clock = 5_000;
    for (let i = 0; i < 5; i++) {
      const r = await tryProviders([p1, p2], call(), { breakers, now });
      assert.ok(r.ok && r.provider === 'second');
      assert.deepEqual(r.attempts[0], { provider: 'first', outcome: 'skipped', reason: 'breaker-open' });
    }
    assert.equal(first.requests.length, 3, 'no request reached the provider while open');

    clock = 10_000;
    first.fault = undefined;
    const trial = await tryProviders([p1, p2], call(), { breakers, now });
    assert.ok(trial.ok);
    assert.equal(trial.provider, 'first');
    assert.equal(first.requests.length, 4);
    assert.equal(breakers.get('first').state(clock), 'closed');
  });

  test('a failed half-open trial shuts the provider for another cool-down', async () => {
    const breakers = new BreakerSet({ failureThreshold: 1, coolDownMs: 1_000 });
    first.fault = { kind: 'status', status: 500 };
    await tryProviders([p1, p2], call(), { breakers, now });
    clock = 1_000;
    await tryProviders([p1, p2], call(), { breakers, now });
    assert.equal(first.requests.length, 2);
    clock = 1_500;
    const r = await tryProviders([p1, p2], call(), { breakers, now });
    assert.equal(r.attempts[0].reason, 'breaker-open');
    assert.equal(first.requests.length, 2);
  });
});

test('a breaker says when it lets a request through again', () => {
  const b = new CircuitBreaker({ failureThreshold: 1, coolDownMs: 10_000 });
  assert.equal(b.retryInMs(0), 0);
  b.onFailure(1_000);
  assert.equal(b.retryInMs(4_000), 7_000);
  assert.equal(b.retryInMs(11_000), 0, 'half-open: the trial may go');
  assert.ok(b.allow(11_000));
  assert.equal(b.retryInMs(12_000), 9_000, 'trial in flight: the next after another cool-down');
});
