// A rolling update of the agent on one node under steady load loses no request. The test plays the
// cluster: the API stand-in holds the agent pods; "kubelet" copies each agent's /readyz into its
// pod's Ready condition; "kube-proxy" sends every request to a ready, non-terminating agent pod of
// this node (internalTrafficPolicy: Local), re-reading the endpoints every 50 ms from the API; the
// "DaemonSet controller" does maxSurge 1 / maxUnavailable 0: start the new agent, wait until it is
// ready, then terminate the old one (preStop pause, then SIGTERM and drain).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request, Agent } from 'undici';
import { stringify } from 'yaml';
import { startSim, type SimServer } from '../shared/sim/server.ts';
import { FakeKubeApiServer, type KubeObject } from './fixtures/kube-apiserver.ts';
import { runAgent, stopAgent, type AgentProcess } from './helpers/process.ts';
import { chatBody, MODEL, waitFor } from './helpers/stack.ts';

const NODE = 'node-a';
const REQUESTS = 1_000;

let api: FakeKubeApiServer;
let sims: SimServer[] = [];
let config: string;

before(async () => {
  sims = await Promise.all(['127.0.0.2', '127.0.0.3'].map((host) => startSim({ host, models: [MODEL], maxSeqs: 64 })));
  api = await FakeKubeApiServer.start();
  api.put({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'kinference' } });
  api.put({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'inference' } });
  for (const [i, sim] of sims.entries()) {
    const { hostname, port } = new URL(sim.url);
    api.put({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        name: `llama-${i}`,
        namespace: 'inference',
        annotations: { 'kinference.io/model': MODEL, 'kinference.io/engine': 'vllm', 'kinference.io/port': port },
      },
      spec: { nodeName: NODE, containers: [{ name: 'main' }] },
      status: {
        phase: 'Running',
        podIP: hostname,
        podIPs: [{ ip: hostname }],
        conditions: [{ type: 'Ready', status: 'True' }],
      },
    });
  }
  api.put({
    apiVersion: 'kinference.io/v1alpha1',
    kind: 'InferencePolicy',
    metadata: { name: 'default', namespace: 'kinference' },
    spec: { slo: { ttft: '30s' } },
  });
  api.put({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: 'kinference-providers', namespace: 'kinference' },
    data: { 'providers.yaml': '[]' },
  });
  config = join(mkdtempSync(join(tmpdir(), 'kinference-rollout-')), 'agent.yaml');
  writeFileSync(
    config,
    stringify({
      discovery: 'kubernetes',
      listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0' },
      scrapeInterval: '50ms',
      kubernetes: { kubeconfig: api.kubeconfigPath },
      limits: { drainTimeout: '10s' },
      logLevel: 'error',
    }),
  );
});
after(async () => {
  await api?.close();
  for (const sim of sims) await sim.close();
});

/** An agent pod of the DaemonSet, as the API holds it, with the process behind it. */
interface AgentPod {
  name: string;
  process: AgentProcess;
}

function putAgentPod(pod: AgentPod, ready: boolean, terminating = false): void {
  const { port } = new URL(pod.process.api);
  api.put({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: pod.name,
      namespace: 'kinference',
      labels: { 'app.kubernetes.io/component': 'agent' },
      annotations: { 'test/api-port': port },
      ...(terminating ? { deletionTimestamp: new Date().toISOString() } : {}),
    },
    spec: { nodeName: NODE, containers: [{ name: 'agent' }] },
    status: {
      phase: 'Running',
      podIP: '127.0.0.1',
      conditions: [{ type: 'Ready', status: ready && !terminating ? 'True' : 'False' }],
    },
  });
}

async function startAgentPod(name: string, podIp: string): Promise<AgentPod> {
  const process_ = await runAgent(config, { ...process.env, KINFERENCE_NODE: NODE, KINFERENCE_POD_IP: podIp });
  const pod = { name, process: process_ };
  putAgentPod(pod, false);
  return pod;
}

/** kubelet: the readiness probe, copied into the pod's Ready condition. */
async function probe(pod: AgentPod): Promise<boolean> {
  const ready = await fetch(`${pod.process.admin}/readyz`).then(
    (r) => r.ok,
    () => false,
  );
  putAgentPod(pod, ready);
  return ready;
}

test('a rolling update (maxSurge 1, maxUnavailable 0) under steady load loses none of 1,000 requests', async () => {
  const old = await startAgentPod('agent-old', '127.0.0.50');
  let fresh: AgentPod | undefined;
  try {
    await rollOut(old, (pod) => (fresh = pod));
  } finally {
    for (const pod of [old, fresh]) if (pod && pod.process.child.exitCode === null) pod.process.child.kill('SIGKILL');
  }
});

async function rollOut(old: AgentPod, started: (pod: AgentPod) => void): Promise<void> {
  await waitFor(() => probe(old), 10_000, 'the old agent ready');

  // kube-proxy: ready, non-terminating agent endpoints on this node, re-read every 50 ms.
  let endpoints: string[] = [];
  const refresh = async () => {
    const response = await fetch(
      `${api.url}/api/v1/namespaces/kinference/pods?labelSelector=${encodeURIComponent('app.kubernetes.io/component=agent')}`,
      { headers: { authorization: `Bearer ${api.token}` } },
    );
    const list = (await response.json()) as { items: KubeObject[] };
    endpoints = list.items
      .filter(
        (p) =>
          !(p.metadata as { deletionTimestamp?: string }).deletionTimestamp &&
          (p.status as { conditions: { type: string; status: string }[] }).conditions.some(
            (c) => c.type === 'Ready' && c.status === 'True',
          ),
      )
      .map(
        (p) =>
          `http://127.0.0.1:${(p.metadata as { annotations: Record<string, string> }).annotations['test/api-port']}`,
      );
  };
  await refresh();
  let proxying = true;
  const proxy = (async () => {
    while (proxying) {
      await refresh();
      await new Promise((r) => setTimeout(r, 50));
    }
  })();

  const client = new Agent({ keepAliveTimeout: 1_000 });
  const outcomes: Record<string, number> = {};
  const byAgent: Record<string, number> = {};
  let sent = 0;
  const load = Promise.all(
    Array.from({ length: 8 }, async () => {
      while (sent < REQUESTS) {
        sent++;
        const target = endpoints[Math.floor(Math.random() * endpoints.length)];
        let outcome: string;
        try {
          const res = await request(`${target}/v1/chat/completions`, {
            method: 'POST',
            dispatcher: client,
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify(chatBody('roll', { max_tokens: 4 })),
          });
          await res.body.text();
          outcome = String(res.statusCode);
        } catch (error) {
          outcome = (error as { code?: string }).code ?? 'error';
        }
        outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
        byAgent[target] = (byAgent[target] ?? 0) + 1;
      }
    }),
  );

  // The DaemonSet controller, once some load is flowing.
  await waitFor(() => sent >= 200, 20_000, 'load before the update');
  const fresh = await startAgentPod('agent-new', '127.0.0.51');
  started(fresh);
  await waitFor(() => probe(fresh), 10_000, 'the new agent ready'); // surge: both run now
  await waitFor(() => endpoints.length === 2, 5_000, 'kube-proxy to see both agents');
  putAgentPod(old, false, true); // deleted: leaves the endpoints
  await new Promise((r) => setTimeout(r, 500)); // preStop pause
  assert.equal(await stopAgent(old.process), 0, 'the old agent drained and exited cleanly');

  await load;
  proxying = false;
  await proxy;
  await client.close();
  await stopAgent(fresh.process);

  assert.equal(sent >= REQUESTS, true);
  assert.deepEqual(outcomes, { 200: sent }, `every request answered 200: ${JSON.stringify(outcomes)}`);
  assert.equal(Object.keys(byAgent).length, 2, 'both agents served part of the load');
}
