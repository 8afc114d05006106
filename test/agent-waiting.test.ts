// Ordered waiting through a running agent: one pod that takes one request at a time, a request
// holding it, and a line of waiters. When it frees, the head of the line gets it: fair across
// tenants (a tenant sending ten times more does not take ten pods for one), first come first
// served within a tenant, and a critical request overtakes sheddable ones.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { chatBody, postJson, startStack, waitFor, type Stack } from './helpers/stack.ts';

describe('ordered waiting for a pod', () => {
  let stack: Stack;

  before(async () => {
    stack = await startStack({
      pods: [{ maxSeqs: 4 }],
      config: {
        limits: { maxConnectionsPerPod: 1 },
        policies: [
          {
            metadata: { name: 'default', namespace: '*' },
            spec: {
              slo: { ttft: '60s' },
              exclude: [],
              wait: { max: '60s' },
              priority: { class: 'sheddable', header: ['critical'] },
            },
          },
        ],
      },
    });
  });
  after(() => stack.close());

  /** A streamed request that holds the only pod until aborted. */
  async function holdPod(): Promise<() => Promise<void>> {
    const controller = new AbortController();
    const res = await fetch(`${stack.api}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-kinference-tenant': 'holder' },
      body: JSON.stringify(chatBody('hold', { stream: true, max_tokens: 8000 })),
      signal: controller.signal,
    });
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    await reader.read(); // the pod has it
    return async () => {
      controller.abort();
      await reader.closed.catch(() => {});
    };
  }

  async function waiting(): Promise<number> {
    const text = await (await fetch(`${stack.admin}/metrics`)).text();
    return [...text.matchAll(/^kinference_waiting_requests\{priority="\w+"\} (\d+)$/gm)].reduce(
      (sum, m) => sum + Number(m[1]),
      0,
    );
  }

  /** Sends requests one by one (each queued before the next, so arrival order is known); resolves to the order they were answered in. */
  function lineUp(served: string[]) {
    return async (name: string, tenant: string, headers: Record<string, string> = {}) => {
      const before = await waiting();
      const answer = postJson(`${stack.api}/v1/chat/completions`, chatBody('hi', { max_tokens: 2 }), {
        'x-kinference-tenant': tenant,
        ...headers,
      }).then(async (res) => {
        assert.equal(res.status, 200, `${name}: ${await res.clone().text()}`);
        await res.arrayBuffer();
        served.push(name);
      });
      await waitFor(async () => (await waiting()) === before + 1, 5000, `${name} to wait`);
      return { answer }; // wrapped: an async function returning the promise itself would wait for it
    };
  }

  it('serves a tenant with one tenth of the traffic within a bounded share of the wait', async () => {
    const release = await holdPod();
    const served: string[] = [];
    const send = lineUp(served);
    const answers: Promise<void>[] = [];
    for (let i = 0; i < 10; i++) answers.push((await send(`big-${i}`, 'big')).answer);
    answers.push((await send('small-0', 'small')).answer);
    for (let i = 10; i < 20; i++) answers.push((await send(`big-${i}`, 'big')).answer);
    answers.push((await send('small-1', 'small')).answer);
    await release();
    await Promise.all(answers);
    const big = served.filter((n) => n.startsWith('big'));
    assert.deepEqual(
      big,
      Array.from({ length: 20 }, (_, i) => `big-${i}`),
      'first come first served within a tenant',
    );
    // A race or one FIFO line would serve small-0 11th and small-1 22nd. Fair across tenants, the
    // small tenant's k-th request (from 0) goes by turn 2k+2.
    const first = served.indexOf('small-0');
    const second = served.indexOf('small-1');
    assert.ok(first <= 1, `small-0 served at turn ${first + 1}: ${served.join(' ')}`);
    assert.ok(second <= 3, `small-1 served at turn ${second + 1}: ${served.join(' ')}`);
  });

  it('lets a critical request overtake sheddable ones', async () => {
    const release = await holdPod();
    const served: string[] = [];
    const send = lineUp(served);
    const answers: Promise<void>[] = [];
    for (let i = 0; i < 5; i++) answers.push((await send(`sheddable-${i}`, `team-${i}`)).answer);
    answers.push((await send('critical', 'team-late', { 'x-kinference-priority': 'critical' })).answer);
    await release();
    await Promise.all(answers);
    assert.equal(served[0], 'critical', served.join(' '));
  });
});
