// The telemetry trust boundary: a page whose numbers cannot be true is refused whole, the pod is
// unhealthy with that reason (in /debug/state and /explain), and it never wins a decision.
import { after, before, describe, it, test } from 'node:test';
import assert from 'node:assert/strict';
import { startAgent, type RunningAgent } from '../agent/agent.ts';
import { settingsFromObject } from '../agent/config/load.ts';
import { FailureLog } from '../agent/telemetry/failure-log.ts';
import { implausibility } from '../agent/telemetry/plausible.ts';
import type { PodLoad } from '../agent/types.ts';
import { startSim, type SimServer } from '../shared/sim/server.ts';
import { CHAT_ANSWER, startScriptedPod, vllmPage, type ScriptedPod } from './fixtures/scripted-pod.ts';
import { chatBody, MODEL, postJson, waitFor } from './helpers/stack.ts';

const load = (over: Partial<PodLoad> = {}): PodLoad => ({
  at: 0,
  engine: 'vllm',
  waiting: 2,
  running: 3,
  kvCache: 0.4,
  finished: 10,
  promptTokens: 1000,
  ttftSum: 5,
  ttftCount: 10,
  ...over,
});

describe('implausibility', () => {
  test('accepts an honest page, an engine without KV use, and a restart (every counter down)', () => {
    assert.equal(implausibility(load(), undefined), undefined);
    assert.equal(implausibility(load({ kvCache: NaN }), undefined), undefined);
    assert.equal(implausibility(load({ finished: 0, promptTokens: 0, ttftSum: 0, ttftCount: 0 }), load()), undefined);
  });
  test('refuses negative, NaN, infinite and absurd gauges, naming the value', () => {
    assert.match(implausibility(load({ waiting: -1000 }), undefined)!, /waiting = -1000/);
    assert.match(implausibility(load({ running: NaN }), undefined)!, /running = NaN/);
    assert.match(implausibility(load({ waiting: Infinity }), undefined)!, /waiting = Infinity/);
    assert.match(implausibility(load({ running: 1e9 }), undefined)!, /running = 1000000000/);
    assert.match(implausibility(load({ kvCache: 7 }), undefined)!, /kvCache = 7/);
    assert.match(implausibility(load({ kvCache: -0.5 }), undefined)!, /kvCache/);
  });
  test('refuses broken counters and counters that go backwards while others go forwards', () => {
    assert.match(implausibility(load({ finished: -1 }), undefined)!, /finished = -1/);
    assert.match(implausibility(load({ ttftSum: -Infinity }), undefined)!, /ttftSum/);
    assert.match(implausibility(load({ promptTokens: 1e18 }), undefined)!, /promptTokens/);
    assert.match(
      implausibility(load({ finished: 5, promptTokens: 2000 }), load())!,
      /backwards.*finished went from 10 to 5/,
    );
    // The first counter down, in PodLoad's order, is the one named.
    assert.match(
      implausibility(load({ ttftSum: 1, finished: 5, promptTokens: 2000 }), load())!,
      /backwards.*ttftSum went from 5 to 1$/,
    );
    assert.match(implausibility(load({ ttftSum: NaN, finished: 5 }), load())!, /^ttftSum = NaN/);
  });
});

test('failure log: the first failure at once, then one line per interval saying how many were held back', () => {
  const log = new FailureLog(1000);
  assert.equal(log.line('pod', 'down', 0), 'down');
  assert.equal(log.line('pod', 'down', 10), undefined);
  assert.equal(log.line('pod', 'down', 500), undefined);
  assert.equal(log.line('other', 'other down', 500), 'other down');
  assert.equal(log.line('pod', 'down', 1000), 'down (2 more since the last line)');
  log.forget('pod');
  assert.equal(log.line('pod', 'down again', 1001), 'down again');
});

describe('a pod whose /metrics lies does not capture traffic', () => {
  let agent: RunningAgent;
  let honest: SimServer;
  let liar: ScriptedPod;
  let lie = { waiting: '-1000', running: '-1000' };
  const logged: string[] = [];

  before(async () => {
    honest = await startSim({ models: [MODEL], seed: 3, name: 'honest' });
    liar = await startScriptedPod(
      () => vllmPage(MODEL, lie.waiting, lie.running),
      () => CHAT_ANSWER,
    );
    agent = await startAgent(
      settingsFromObject({
        node: 'node-a',
        listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0' },
        scrapeInterval: '50ms',
        pods: [
          {
            name: 'honest',
            namespace: 'inference',
            address: new URL(honest.url).host,
            engine: 'vllm',
            models: [MODEL],
          },
          { name: 'liar', namespace: 'inference', address: liar.address, engine: 'vllm', models: [MODEL] },
        ],
        limits: { scrapeFailureLogInterval: '1h' },
      }),
      { log: (_level, message) => logged.push(message) },
    );
    await waitFor(async () => (await fetch(`${agent.adminUrl}/readyz`)).ok, 5000, 'agent ready');
  });
  after(async () => {
    await agent.shutdown();
    await honest.close();
    await liar.close();
  });

  for (const [what, value] of [
    ['negative', '-1000'],
    ['NaN', 'NaN'],
    ['+Inf', '+Inf'],
  ] as const) {
    it(`${what} queue: unhealthy with a reason in /explain and /debug/state, and 0 of 20 requests`, async () => {
      lie = { waiting: value, running: value };
      const before = liar.served;
      await waitFor(
        async () => {
          const e = (await (await fetch(`${agent.adminUrl}/explain?model=${MODEL}`)).json()) as {
            dropped: { pod: string; reason: string; detail: string }[];
          };
          return e.dropped.some(
            (d) => d.pod === 'local/liar' && d.reason === 'unhealthy' && /implausible page: waiting = /.test(d.detail),
          );
        },
        3000,
        'the liar to be dropped as unhealthy',
      );
      const state = (await (await fetch(`${agent.adminUrl}/debug/state`)).json()) as {
        pods: { local: { pod: { name: string }; healthy: boolean; unhealthyReason: string | null }[] };
      };
      const pod = state.pods.local.find((p) => p.pod.name === 'liar')!;
      assert.equal(pod.healthy, false);
      assert.match(pod.unhealthyReason ?? '', /implausible page/);
      for (let i = 0; i < 20; i++) {
        const response = await postJson(`${agent.apiUrl}/v1/chat/completions`, chatBody(`q${i}`));
        assert.equal(response.status, 200);
        assert.equal(response.headers.get('x-kinference-route'), 'local/honest');
        await response.arrayBuffer();
      }
      assert.equal(liar.served, before, 'not one request reached the lying pod');
    });
  }

  it('counts implausible scrapes, logs the failure once per interval, and trusts the pod again once its page is plausible', async () => {
    const metrics = await (await fetch(`${agent.adminUrl}/metrics`)).text();
    assert.match(metrics, /kinference_scrapes_total\{outcome="implausible"\} [1-9]/);
    const lines = logged.filter((m) => m.includes('pod inference/liar'));
    assert.equal(lines.length, 1, `one line per interval, got ${lines.length}`);
    assert.match(lines[0], /implausible page/);
    lie = { waiting: '0', running: '0' };
    await waitFor(
      async () => {
        const e = (await (await fetch(`${agent.adminUrl}/explain?model=${MODEL}`)).json()) as {
          candidates: { pod: string }[];
        };
        return e.candidates.some((c) => c.pod === 'local/liar');
      },
      3000,
      'the pod to be a candidate again',
    );
  });
});
