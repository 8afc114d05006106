// Predict, then route: the agent reads each pod's real queue (filled by traffic it never sees),
// sends requests around a busy pod, and returns once it drains; explain says why.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { formatExplanation, runExplainCommand } from '../agent/cli/explain.ts';
import type { Explanation } from '../agent/server/admin/explain.ts';
import { chatBody, MODEL, postJson, startStack, waitFor, type Stack } from './helpers/stack.ts';

describe('routing around a pod filled by outside traffic', () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack({
      pods: [{ maxSeqs: 2 }, { maxSeqs: 2 }, { maxSeqs: 2 }],
      config: {
        policies: [
          {
            metadata: { name: 'default', namespace: '*' },
            spec: { slo: { ttft: '2s' }, exclude: [{ metric: 'queued', above: 2, window: '1s' }] },
          },
        ],
      },
    });
  });
  after(() => stack.close());

  const routeOf = async () => {
    const response = await postJson(
      `${stack.api}/v1/chat/completions`,
      chatBody('hello', { stream: true, max_tokens: 4 }),
    );
    await response.text();
    return response.headers.get('x-kinference-route') ?? '';
  };

  it('sends nothing to the busy pod while its queue is long, and uses it again once it drains', async () => {
    // Another client (not through this agent) fills pod-0: 2 running, 8 waiting.
    const held = Array.from({ length: 10 }, () =>
      stack.sims[0].engine.submit({ promptTokens: 100, maxTokens: 100_000 }),
    );
    await waitFor(
      async () => {
        const e = (await (await fetch(`${stack.admin}/explain?model=${MODEL}`)).json()) as Explanation;
        return e.dropped.some((d) => d.pod === 'local/pod-0' && d.reason === 'excluded');
      },
      3000,
      'pod-0 to be excluded',
    );

    const routes = [];
    for (let i = 0; i < 12; i++) routes.push(await routeOf());
    assert.ok(!routes.includes('local/pod-0'), routes.join(' '));
    assert.ok(routes.includes('local/pod-1') && routes.includes('local/pod-2'), routes.join(' '));

    for (const h of held) if (h.accepted) h.seq.abort();
    await waitFor(async () => (await routeOf()) === 'local/pod-0', 5000, 'requests to reach pod-0 again');
  });

  it('explains a decision over HTTP and on the command line', async () => {
    const explanation = (await (
      await fetch(`${stack.admin}/explain?model=${MODEL}&tenant=team-a&promptTokens=500`)
    ).json()) as Explanation;
    assert.equal(explanation.action, 'pod');
    assert.equal(explanation.candidates.length, 3);
    assert.ok(explanation.predictedTtftMs! > 0);
    assert.match(formatExplanation(explanation), /^decision: pod → local\/pod-\d \(predicted TTFT [\d.]+ ms\)/);

    const lines: string[] = [];
    const log = console.log;
    console.log = (line: string) => lines.push(line);
    try {
      assert.equal(
        await runExplainCommand(['--admin', stack.admin, '--model', MODEL, '--tags', 'pii', '--prompt-tokens', '300']),
        0,
      );
      assert.equal(await runExplainCommand(['--admin', stack.admin, '--model', 'nope']), 1);
    } finally {
      console.log = log;
    }
    assert.match(
      lines.join('\n'),
      /candidates \(best first\):\n {2}local\/pod-\d +mean +[\d.]+ ms {2}p99 +[\d.]+ ms {2}margin +-?[\d.]+ ms/,
    );
    for (const c of explanation.candidates) {
      assert.ok(c.quantileTtftMs >= c.predictedTtftMs, 'the quantile is never below the mean');
      assert.equal(c.marginMs, Math.round((2000 - c.quantileTtftMs) * 10) / 10);
    }
    assert.deepEqual(explanation.slo, { ttftMs: 2000, attainment: 0.99, judgedOn: 'mean' });
  });

  it('rejects a bad explain query with a clear error', async () => {
    const response = await fetch(`${stack.admin}/explain?model=${MODEL}&promptTokens=lots`);
    assert.equal(response.status, 400);
    const body = (await response.json()) as { error: { param: string } };
    assert.equal(body.error.param, 'promptTokens');
  });
});

describe('a request that may not leave waits for a pod', () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack({
      pods: [{ maxSeqs: 2 }],
      config: {
        policies: [
          {
            metadata: { name: 'default', namespace: '*' },
            spec: {
              slo: { ttft: '2s' },
              exclude: [{ metric: 'queued', above: 2, window: '1s' }],
              wait: { max: '10s' },
            },
          },
        ],
      },
    });
  });
  after(() => stack.close());

  it('is woken and served as soon as the pod drains, and the wait is counted', async () => {
    const held = Array.from({ length: 8 }, () =>
      stack.sims[0].engine.submit({ promptTokens: 100, maxTokens: 100_000 }),
    );
    await waitFor(
      async () =>
        ((await (await fetch(`${stack.admin}/explain?model=${MODEL}`)).json()) as Explanation).action === 'wait',
      3000,
      'the pod to be excluded',
    );
    const pending = postJson(`${stack.api}/v1/chat/completions`, chatBody('hello', { max_tokens: 4 }));
    await new Promise((r) => setTimeout(r, 300));
    for (const h of held) if (h.accepted) h.seq.abort();
    const response = await pending;
    assert.equal(response.status, 200);
    assert.equal(response.headers.get('x-kinference-route'), 'local/pod-0');
    await response.arrayBuffer();
    assert.match(await (await fetch(`${stack.admin}/metrics`)).text(), /kinference_waits_total\{outcome="pod"\} 1\n/);
  });
});
