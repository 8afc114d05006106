// Client faults stay the client's, every wait and answer is bounded, and a shutdown says what
// happened: regressions for what a hostile or unlucky client and provider did to the agent.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startOpenAIStandin, refusedPort, type OpenAIStandin } from './fixtures/openai-provider.ts';
import { startScriptedPod, vllmPage, type ScriptedPod } from './fixtures/scripted-pod.ts';
import { chatBody, MODEL, postJson, startStack, waitFor, type Stack, openaiProvider } from './helpers/stack.ts';

const KEY_ENV = 'KINFERENCE_TEST_HARDENING_KEY';
const SECRET = 'sk-hardening-secret-42';

/** `[[[…]]]` nested `depth` deep, inside an otherwise valid chat body. */
function deeplyNested(depth: number): string {
  return `{"model":"${MODEL}","messages":[{"role":"user","content":"hi"}],"tools":${'['.repeat(depth)}${']'.repeat(depth)}}`;
}

async function errorOf(response: Response): Promise<{ message: string; type: string; code: string | null }> {
  return ((await response.json()) as { error: { message: string; type: string; code: string | null } }).error;
}

const provider = (name: string, url: string) => openaiProvider(name, url, KEY_ENV);

describe("client faults stay the client's", () => {
  let stack: Stack;
  let hosted: OpenAIStandin;

  before(async () => {
    process.env[KEY_ENV] = SECRET;
    hosted = await startOpenAIStandin({ apiKey: SECRET });
    const refused = await refusedPort();
    stack = await startStack({
      config: {
        providers: [provider('hosted', hosted.url), provider('down', `http://127.0.0.1:${refused}/v1`)],
        policies: [
          // Nothing meets a 1 ms SLO: every request overflows.
          {
            metadata: { name: 'away', namespace: '*' },
            spec: { slo: { ttft: '1ms' }, overflow: { providers: ['hosted'] }, wait: { max: '100ms' } },
          },
          {
            metadata: { name: 'dead', namespace: 'dead' },
            spec: { slo: { ttft: '1ms' }, overflow: { providers: ['down'] }, wait: { max: '100ms' } },
          },
        ],
        limits: { maxJsonDepth: 32 },
      },
    });
  });
  after(async () => {
    await stack.close();
    await hosted.close();
  });
  const send = (body: unknown, tenant = 'team-a') =>
    postJson(`${stack.api}/v1/chat/completions`, body, { 'x-kinference-tenant': tenant });

  it("deeply nested bodies get 400 before anything is sent, and never open a provider's breaker", async () => {
    for (const depth of [33, 10_000, 100_000]) {
      const response = await send(deeplyNested(depth));
      assert.equal(response.status, 400);
      const error = await errorOf(response);
      assert.equal(error.code, 'too_deep');
      assert.match(error.message, /deeper than 32 levels/);
    }
    assert.equal(hosted.requests.length, 0, 'nothing reached the provider');
    // Nesting within the limit is just a body, and overflow still works for everyone.
    const ok = await send(deeplyNested(20));
    assert.equal(ok.status, 200);
    assert.equal(ok.headers.get('x-kinference-route'), 'overflow/hosted');
    await ok.arrayBuffer();
    const state = (await (await fetch(`${stack.admin}/debug/state`)).json()) as {
      providers: { name: string; breaker: { state: string } }[];
    };
    assert.equal(state.providers.find((p) => p.name === 'hosted')?.breaker.state, 'closed');
  });

  it('content parts must be strings or objects (shape checked before sending)', async () => {
    const response = await send({ model: MODEL, messages: [{ role: 'user', content: [[['x']]] }] });
    assert.equal(response.status, 400);
    assert.equal(((await response.json()) as { error: { param: string } }).error.param, 'messages[0].content');
  });

  it('with every breaker open: 503, Retry-After from the cool-down, and a message that says so', async () => {
    // Three failures open the breaker of the only provider this tenant may use.
    for (let i = 0; i < 3; i++) {
      const response = await send(chatBody(`fail ${i}`), 'dead');
      assert.equal(response.status, 503);
      await response.arrayBuffer();
    }
    const response = await send(chatBody('after'), 'dead');
    assert.equal(response.status, 503);
    const retryAfter = Number(response.headers.get('retry-after'));
    assert.ok(retryAfter >= 1 && retryAfter <= 10, `retry-after ${retryAfter} within the 10 s cool-down`);
    const error = await errorOf(response);
    assert.equal(error.code, 'providers_unavailable');
    assert.match(error.message, /circuit breaker is open/);
    assert.doesNotMatch(error.message, /may overflow/);
  });

  it('a client that disconnects is counted as cancelled, not as a 502 or 503', async () => {
    hosted.fault = { kind: 'hang' };
    try {
      const asked = hosted.requests.length;
      const controller = new AbortController();
      const pending = fetch(`${stack.api}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(chatBody('hang')),
        signal: controller.signal,
      }).catch(() => undefined);
      await waitFor(() => hosted.requests.length > asked, 3000, 'the provider to be asked');
      controller.abort();
      await pending;
      await waitFor(
        async () =>
          /kinference_requests_total\{api="chat",route="\w+",outcome="cancelled"[^}]*\} 1/.test(
            await (await fetch(`${stack.admin}/metrics`)).text(),
          ),
        3000,
        'the cancelled outcome',
      );
      const metrics = await (await fetch(`${stack.admin}/metrics`)).text();
      assert.doesNotMatch(metrics, /outcome="502"/, 'the disconnect is not a bad gateway');
    } finally {
      hosted.fault = undefined;
    }
  });
});

describe('bounded upstream answers', () => {
  let stack: Stack;
  let hosted: OpenAIStandin;
  let huge: ScriptedPod;

  before(async () => {
    process.env[KEY_ENV] = SECRET;
    hosted = await startOpenAIStandin({ apiKey: SECRET });
    huge = await startScriptedPod(
      () => vllmPage(MODEL, '0', '0'),
      () => JSON.stringify({ padding: 'x'.repeat(1024 * 1024) }),
    );
    stack = await startStack({
      pods: [],
      extraPods: [{ name: 'huge', address: huge.address }],
      config: {
        providers: [provider('hosted', hosted.url)],
        policies: [
          {
            metadata: { name: 'away', namespace: 'away' },
            spec: { slo: { ttft: '1ms' }, overflow: { providers: ['hosted'] }, wait: { max: '100ms' } },
          },
        ],
        limits: { maxUpstreamBodyBytes: 64 * 1024 },
      },
    });
  });
  after(async () => {
    await stack.close();
    await hosted.close();
    await huge.close();
  });

  it('a provider answer over maxUpstreamBodyBytes is a clear 502, not relayed whole', async () => {
    hosted.fault = { kind: 'status', status: 200, body: JSON.stringify({ padding: 'x'.repeat(1024 * 1024) }) };
    try {
      const response = await postJson(`${stack.api}/v1/chat/completions`, chatBody('big'), {
        'x-kinference-tenant': 'away',
      });
      assert.equal(response.status, 502);
      assert.match((await errorOf(response)).message, /answer larger than 65536 bytes/);
    } finally {
      hosted.fault = undefined;
    }
  });

  it('a pod answer over maxUpstreamBodyBytes is a clear 502', async () => {
    const response = await postJson(`${stack.api}/v1/chat/completions`, chatBody('big'), {
      'x-kinference-tenant': 'huge',
    });
    assert.equal(response.status, 502);
    assert.equal(response.headers.get('x-kinference-route'), 'local/huge');
    assert.match((await errorOf(response)).message, /larger than 65536 bytes/);
  });
});

describe('no hidden queue at a pod', () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack({
      pods: [{ maxSeqs: 64 }],
      config: {
        policies: [
          { metadata: { name: 'default', namespace: '*' }, spec: { slo: { ttft: '30s' }, wait: { max: '200ms' } } },
        ],
        limits: { maxConnectionsPerPod: 2 },
      },
    });
  });
  after(() => stack.close());

  it('past maxConnectionsPerPod the pod is at capacity for the router: the request waits with a deadline instead of queueing in the pool', async () => {
    const controllers = [new AbortController(), new AbortController()];
    const streams = await Promise.all(
      controllers.map((c) =>
        fetch(`${stack.api}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(chatBody('long', { stream: true, max_tokens: 8000 })),
          signal: c.signal,
        }),
      ),
    );
    for (const s of streams) assert.equal(s.status, 200);
    const explain = (await (await fetch(`${stack.admin}/explain?model=${MODEL}`)).json()) as {
      action: string;
      dropped: { reason: string; detail: string }[];
    };
    assert.equal(explain.action, 'wait');
    assert.deepEqual(
      explain.dropped.map((d) => [d.reason, d.detail]),
      [['at-capacity', '2 requests in flight (limit 2)']],
    );
    const third = await postJson(`${stack.api}/v1/chat/completions`, chatBody('third'));
    assert.equal(third.status, 429, 'bounded wait, then a clear answer');
    await third.arrayBuffer();
    for (const c of controllers) c.abort();
    await waitFor(
      async () =>
        ((await (await fetch(`${stack.admin}/explain?model=${MODEL}`)).json()) as { action: string }).action === 'pod',
      3000,
      'room again',
    );
  });
});

describe('shutdown past the drain deadline', () => {
  it('ends a running stream with an error event and [DONE], not a cut socket', async () => {
    const stack = await startStack({ pods: [{ maxSeqs: 8 }], config: { limits: { drainTimeout: '200ms' } } });
    let closed = false;
    try {
      const response = await postJson(
        `${stack.api}/v1/chat/completions`,
        chatBody('long', { stream: true, max_tokens: 8000 }),
      );
      assert.equal(response.status, 200);
      const reader = response.body!.getReader();
      await reader.read();
      const shutdown = stack.close().then(() => (closed = true));
      let text = '';
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += Buffer.from(value).toString('utf8');
      }
      await shutdown;
      const frames = text
        .trim()
        .split('\n\n')
        .filter((f) => f.startsWith('data: '));
      assert.equal(frames.at(-1), 'data: [DONE]');
      const error = JSON.parse(frames.at(-2)!.slice('data: '.length)) as { error: { code: string; message: string } };
      assert.equal(error.error.code, 'agent_shutting_down');
      assert.match(error.error.message, /drain deadline/);
    } finally {
      if (!closed) await stack.close();
    }
  });
});

// A provider that sends headers and then nothing: the idle timeout, not 300 s.
describe('provider body idle timeout', () => {
  let stall: Server;
  let stack: Stack;
  before(async () => {
    process.env[KEY_ENV] = SECRET;
    stall = createServer((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"id":');
    });
    await new Promise<void>((resolve) => stall.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(stall.address() as AddressInfo).port}/v1`;
    stack = await startStack({
      config: {
        providers: [provider('stalls', url)],
        policies: [
          {
            metadata: { name: 'away', namespace: '*' },
            spec: { slo: { ttft: '1ms' }, overflow: { providers: ['stalls'] }, wait: { max: '100ms' } },
          },
        ],
        limits: { providerIdleTimeout: '300ms' },
      },
    });
  });
  after(async () => {
    await stack.close();
    stall.closeAllConnections();
    stall.close();
  });

  it('gives up on a silent answer body after providerIdleTimeout', async () => {
    const response = await postJson(`${stack.api}/v1/chat/completions`, chatBody('stall'));
    assert.equal(response.status, 503);
    assert.match((await errorOf(response)).message, /stalls: failed \(timeout\).*silent for 300 ms/);
  });
});
