// The agent in Kubernetes mode against the API stand-in: its production informers find the model
// servers on its node, who is calling (source IP → pod → namespace → tenant → policy), and
// follow changes within a second; while the API is unreachable it keeps serving the last view.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { startAgent, type RunningAgent } from '../agent/agent.ts';
import { settingsFromObject } from '../agent/config/load.ts';
import type { Explanation } from '../agent/server/admin/explain.ts';
import { startSim, type SimServer } from '../shared/sim/server.ts';
import { FakeKubeApiServer, type KubeObject } from './fixtures/kube-apiserver.ts';
import { chatBody, MODEL, waitFor } from './helpers/stack.ts';

const NODE = 'node-a';
const CALLER_IP = '127.0.0.10';
const OTHER_NODE_CALLER_IP = '127.0.0.11';
const UNKNOWN_IP = '127.0.0.12';

/** A request that leaves from `ip`, as an app pod's would. */
function sendFrom(
  apiUrl: string,
  ip: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; policy: string | undefined }> {
  const { port } = new URL(apiUrl);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: '127.0.0.1',
        port,
        path: '/v1/chat/completions',
        method: 'POST',
        localAddress: ip,
        headers: { 'content-type': 'application/json', ...headers },
      },
      (res) => {
        res.resume();
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, policy: res.headers['x-kinference-policy'] as string | undefined }),
        );
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify(chatBody()));
  });
}

function pod(
  namespace: string,
  name: string,
  ip: string,
  extra: { node?: string; annotations?: Record<string, string> } = {},
): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace, annotations: extra.annotations ?? {} },
    spec: { nodeName: extra.node ?? NODE, containers: [{ name: 'main' }] },
    status: { phase: 'Running', podIP: ip, podIPs: [{ ip }], conditions: [{ type: 'Ready', status: 'True' }] },
  };
}

function modelServer(name: string, sim: SimServer, node = NODE): KubeObject {
  const { hostname, port } = new URL(sim.url);
  return pod('inference', name, hostname, {
    node,
    annotations: { 'kinference.io/model': MODEL, 'kinference.io/engine': 'vllm', 'kinference.io/port': port },
  });
}

describe('agent in Kubernetes mode', () => {
  let api: FakeKubeApiServer;
  let agent: RunningAgent;
  const sims: SimServer[] = [];

  before(async () => {
    for (const host of ['127.0.0.2', '127.0.0.3', '127.0.0.4']) sims.push(await startSim({ host, models: [MODEL] }));
    api = await FakeKubeApiServer.start();
    api.put({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'kinference' } });
    api.put({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'inference' } });
    api.put({
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: 'team-a', annotations: { 'kinference.io/policy': 'strict' } },
    });
    api.put(modelServer('llama-0', sims[0]));
    api.put(modelServer('llama-1', sims[1]));
    api.put(modelServer('elsewhere', sims[2], 'node-b')); // another node's pod: not this agent's to scrape
    api.put(pod('team-a', 'app', CALLER_IP));
    // A finance pod on another node reaches this agent's pod IP directly.
    api.put({
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: 'finance', annotations: { 'kinference.io/policy': 'home' } },
    });
    api.put(pod('finance', 'ledger', OTHER_NODE_CALLER_IP, { node: 'node-b' }));
    api.put({
      apiVersion: 'kinference.io/v1alpha1',
      kind: 'InferencePolicy',
      metadata: { name: 'home', namespace: 'finance' },
      spec: { slo: { ttft: '1ms' }, overflow: { providers: [] }, wait: { max: '100ms' } },
    });
    // Cluster-wide (agent namespace) and team-a's own strict policy, pinned by its annotation.
    api.put({
      apiVersion: 'kinference.io/v1alpha1',
      kind: 'InferencePolicy',
      metadata: { name: 'default', namespace: 'kinference' },
      spec: { slo: { ttft: '5s' } },
    });
    api.put({
      apiVersion: 'kinference.io/v1alpha1',
      kind: 'InferencePolicy',
      metadata: { name: 'strict', namespace: 'team-a' },
      spec: { slo: { ttft: '1ms' }, wait: { max: '100ms' } },
    });
    api.put({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'kinference-providers', namespace: 'kinference' },
      data: { 'providers.yaml': '[]' },
    });

    const settings = settingsFromObject(
      {
        discovery: 'kubernetes',
        listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0' },
        scrapeInterval: '50ms',
        kubernetes: { kubeconfig: api.kubeconfigPath },
      },
      'test',
      { KINFERENCE_NODE: NODE, KINFERENCE_POD_IP: '127.0.0.50' },
    );
    agent = await startAgent(settings, { log: () => {} });
    await waitFor(async () => (await fetch(`${agent.adminUrl}/readyz`)).ok, 10_000, 'ready');
  });
  after(async () => {
    await agent?.shutdown();
    await api?.close();
    for (const sim of sims) await sim.close();
  });

  const explain = async () => (await (await fetch(`${agent.adminUrl}/explain?model=${MODEL}`)).json()) as Explanation;
  const pods = async () => (await explain()).candidates.map((c) => c.pod).sort();

  it('routes to the model servers on its own node only', async () => {
    // Both local pods, and never the other node's: waited for, since under CPU load a scrape can
    // miss the 100 ms staleness limit for a moment right after start.
    await waitFor(
      async () => JSON.stringify(await pods()) === JSON.stringify(['local/llama-0', 'local/llama-1']),
      3000,
      'both local pods as candidates',
    );
    const response = await fetch(`${agent.apiUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chatBody()),
    });
    assert.equal(response.status, 200);
    assert.match(response.headers.get('x-kinference-route') ?? '', /^local\/llama-[01]$/);
    await response.arrayBuffer();
  });

  it("knows the caller by its source IP and applies its namespace's policy; a tenant header cannot override it", async () => {
    const response = await sendFrom(agent.apiUrl, CALLER_IP, { 'x-kinference-tenant': 'someone-else' });
    // team-a's pinned policy wants TTFT under 1 ms: no pod qualifies, nothing may leave → 429.
    assert.equal(response.status, 429);
    assert.equal(response.policy, 'team-a/strict');
  });

  it('knows a caller on another node by its pod IP; an IP no pod has is unidentified and may not leave', async () => {
    const finance = await sendFrom(agent.apiUrl, OTHER_NODE_CALLER_IP);
    assert.equal(finance.status, 429);
    assert.equal(finance.policy, 'finance/home');
    const who = (await (
      await fetch(`${agent.adminUrl}/explain?ip=${UNKNOWN_IP}`, { method: 'POST', body: JSON.stringify(chatBody()) })
    ).json()) as {
      caller: { namespace: string; unidentified?: string };
      policy: string;
      leave: { allowed: boolean; reason: string };
    };
    assert.equal(who.caller.namespace, '(unidentified)');
    assert.match(who.caller.unidentified ?? '', /no pod known to the cluster has the caller's IP 127\.0\.0\.12/);
    assert.equal(who.policy, '*/default (caller unidentified)');
    assert.equal(who.leave.allowed, false);
    const unknown = await sendFrom(agent.apiUrl, UNKNOWN_IP);
    assert.equal(unknown.status, 200, 'served by a pod: the cluster-wide SLO applies, only leaving is denied');
    // Counted (the other tests' requests from 127.0.0.1, which no pod has, count too).
    assert.match(
      await (await fetch(`${agent.adminUrl}/metrics`)).text(),
      /kinference_unidentified_callers_total\{reason="unknown-ip"\} [1-9]/,
    );
  });

  it('follows pods coming and going within a second, through a dropped watch', async () => {
    api.dropWatches();
    const sim = await startSim({ host: '127.0.0.5', models: [MODEL] });
    sims.push(sim);
    const added = performance.now();
    api.put(modelServer('llama-2', sim));
    await waitFor(async () => (await pods()).includes('local/llama-2'), 1000, 'the new pod');
    assert.ok(performance.now() - added < 1000);
    api.delete('Pod', 'inference', 'llama-0');
    await waitFor(async () => !(await pods()).includes('local/llama-0'), 1000, 'the deleted pod to go');
  });

  it('keeps serving the last view while the API is unreachable, and says so', async () => {
    api.refuseConnections();
    api.dropWatches();
    await waitFor(
      async () => /kinference_discovery_connected 0/.test(await (await fetch(`${agent.adminUrl}/metrics`)).text()),
      5000,
      'disconnected',
    );
    const ready = (await (await fetch(`${agent.adminUrl}/readyz`)).json()) as {
      checks: { discovery: { detail: string } };
    };
    assert.match(ready.checks.discovery.detail, /serving the last known view/);
    const response = await fetch(`${agent.apiUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chatBody()),
    });
    assert.equal(response.status, 200);
    await response.arrayBuffer();
    api.restore();
    await waitFor(
      async () => /kinference_discovery_connected 1/.test(await (await fetch(`${agent.adminUrl}/metrics`)).text()),
      10_000,
      'reconnected',
    );
  });
});
