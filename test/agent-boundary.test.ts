// The platform floor and caller identity, through a running agent in Kubernetes mode. Discovery
// is handed in as data (what the informers would hold), so the test controls exactly which pod
// IPs the cluster knows: the one that sends, or none.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startAgent, type RunningAgent } from '../agent/agent.ts';
import { settingsFromObject } from '../agent/config/load.ts';
import type { Caller, ClusterSnapshot, Discovery } from '../agent/cluster/types.ts';
import { startSim, type SimServer } from '../shared/sim/server.ts';
import { startOpenAIStandin, type OpenAIStandin } from './fixtures/openai-provider.ts';
import { chatBody, MODEL, postJson, waitFor } from './helpers/stack.ts';

const KEY_ENV = 'KINFERENCE_TEST_BOUNDARY_KEY';

function fixedDiscovery(initial: ClusterSnapshot): Discovery & { set(next: Partial<ClusterSnapshot>): void } {
  let snapshot = initial;
  const listeners: (() => void)[] = [];
  return {
    async start() {},
    snapshot: () => snapshot,
    onChange: (listener) => void listeners.push(listener),
    status: () => ({ synced: true, connected: true }),
    async stop() {},
    set(next) {
      snapshot = { ...snapshot, ...next };
      for (const l of listeners) l();
    },
  };
}

describe('the data boundary in Kubernetes mode', () => {
  let sim: SimServer;
  let provider: OpenAIStandin;
  let agent: RunningAgent;
  let discovery: ReturnType<typeof fixedDiscovery>;
  let logs: string[];

  const policies = [
    // The platform: hosted overflow for everyone, a floor that also keeps `confidential` home.
    {
      apiVersion: 'kinference.io/v1alpha1',
      kind: 'InferencePolicy',
      metadata: { name: 'platform', namespace: '*' },
      spec: {
        slo: { ttft: '1ms' },
        exclude: [],
        overflow: { providers: ['hosted'] },
        wait: { max: '1ms' },
        guardrails: { deny: { tags: ['pii', 'unscanned', 'confidential'] } },
      },
    },
    // finance keeps its data home.
    {
      metadata: { name: 'home', namespace: 'finance' },
      spec: { slo: { ttft: '1ms' }, exclude: [], overflow: { providers: [] }, wait: { max: '1ms' } },
    },
    // A team tries to let everything leave.
    {
      metadata: { name: 'leaky', namespace: 'team-a' },
      spec: {
        slo: { ttft: '1ms' },
        exclude: [],
        overflow: { providers: ['hosted'], deny: { tags: [] } },
        wait: { max: '1ms' },
      },
    },
  ];

  before(async () => {
    process.env[KEY_ENV] = 'sk-boundary';
    sim = await startSim({ models: [MODEL], seed: 3, name: 'pod-0' });
    provider = await startOpenAIStandin({ apiKey: 'sk-boundary' });
    discovery = fixedDiscovery({
      pods: [
        {
          uid: 'u-0',
          name: 'pod-0',
          namespace: 'inference',
          node: 'node-a',
          address: new URL(sim.url).host,
          models: [MODEL],
        },
      ],
      namespaces: new Map(),
      policies,
      providers: [
        {
          name: 'hosted',
          kind: 'openai',
          endpoint: provider.url,
          models: { [MODEL]: 'hosted-llama' },
          apiKey: { env: KEY_ENV },
          timeoutMs: 2000,
        },
      ],
      peers: [],
      callers: new Map(),
    });
    logs = [];
    const settings = settingsFromObject(
      {
        node: 'node-a',
        discovery: 'kubernetes',
        listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0' },
        scrapeInterval: '50ms',
      },
      'test',
      {},
    );
    agent = await startAgent(settings, { discovery, log: (_level, message) => logs.push(message) });
    await waitFor(async () => (await fetch(`${agent.adminUrl}/readyz`)).ok, 5000, 'agent ready');
  });
  after(async () => {
    await agent?.shutdown();
    await sim?.close();
    await provider?.close();
  });

  const as = (callers: [string, Caller][]) => discovery.set({ callers: new Map(callers) });
  const send = async (body = chatBody('What is the capital of France?')) => {
    const response = await postJson(`${agent.apiUrl}/v1/chat/completions`, body);
    await response.arrayBuffer();
    return response;
  };

  it('an unknown caller IP is the most restricted tenant: never overflowed, with a reason and a counter', async () => {
    as([]);
    const before = provider.requests.length;
    const response = await send();
    assert.notEqual(response.headers.get('x-kinference-route'), 'overflow/hosted');
    assert.equal(provider.requests.length, before);
    const e = (await (await postJson(`${agent.adminUrl}/explain?ip=10.9.9.9`, chatBody('hi'))).json()) as {
      caller: { unidentified?: string };
      leave: { allowed: boolean; reason: string };
    };
    assert.match(e.caller.unidentified ?? '', /no pod known to the cluster has the caller's IP 10\.9\.9\.9/);
    assert.equal(e.leave.allowed, false);
    assert.match(e.leave.reason, /tenant \(unidentified\) may not leave/);
    const metrics = await (await fetch(`${agent.adminUrl}/metrics`)).text();
    assert.match(metrics, /kinference_unidentified_callers_total\{reason="unknown-ip"\} [1-9]/);
  });

  it('a finance caller from another node, known to the cluster, gets the finance policy: never overflowed', async () => {
    as([['127.0.0.1', { namespace: 'finance', pod: 'ledger-7' }]]);
    const before = provider.requests.length;
    const response = await send();
    assert.notEqual(response.headers.get('x-kinference-route'), 'overflow/hosted');
    assert.equal(provider.requests.length, before);
    // The control: a caller of a namespace the platform lets overflow does leave.
    as([['127.0.0.1', { namespace: 'team-b', pod: 'web-1' }]]);
    const open = await send();
    assert.equal(open.headers.get('x-kinference-route'), 'overflow/hosted');
    assert.equal(provider.requests.length, before + 1);
  });

  it('a namespace policy with deny.tags: [] is rejected, reported and counted; the floor still applies', async () => {
    const state = (await (await fetch(`${agent.adminUrl}/debug/state`)).json()) as {
      policies: { loaded: string[]; rejected: { name: string; reasons: string[] }[] };
    };
    assert.deepEqual(state.policies.loaded.sort(), ['*/platform', 'finance/home']);
    assert.equal(state.policies.rejected[0].name, 'team-a/leaky');
    assert.match(
      state.policies.rejected[0].reasons[0],
      /spec\.overflow\.deny\.tags: may not drop confidential, pii, unscanned: the platform floor \(\*\/platform\)/,
    );
    const metrics = await (await fetch(`${agent.adminUrl}/metrics`)).text();
    assert.match(metrics, /kinference_policies_rejected_total\{reason="guardrail"\} 1/);

    as([['127.0.0.1', { namespace: 'team-a', pod: 'app-1' }]]);
    const before = provider.requests.length;
    const cases: [Record<string, unknown>, string][] = [
      [chatBody('write to jane.doe@example.com'), ''],
      [chatBody('the merger plan'), 'confidential'],
      [chatBody('hello'), ''],
    ];
    for (const [body, tags] of cases) {
      const response = await postJson(`${agent.apiUrl}/v1/chat/completions`, body, { 'x-kinference-tags': tags });
      await response.arrayBuffer();
    }
    // Only the clean, untagged request left.
    assert.equal(provider.requests.length, before + 1);
    assert.ok(!JSON.stringify(provider.requests.slice(before)).includes('jane.doe'));
  });
});
