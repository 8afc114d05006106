// A rolling update of the agent on one node under steady load loses no request. The test plays the
// cluster: the API stand-in holds the agent pods; "kubelet" copies each agent's /readyz into its
// pod's Ready condition; "kube-proxy" sends every request to a ready, non-terminating agent pod of
// this node (internalTrafficPolicy: Local), re-reading the endpoints every 50 ms from the API; the
// "DaemonSet controller" does maxSurge 1 / maxUnavailable 0: start the new agent, wait until it is
// ready, then terminate the old one (preStop pause, then SIGTERM and drain).
//
// Gossip is on: each agent pod is its own gossip origin (two on this node during the surge), and a
// peer agent on another node (another loopback address) routes to this node's pods through gossip
// under steady load the whole time. The test also plays the EndpointSlice controller for the
// headless gossip Service (every agent pod listed; `serving` = its readiness), which is both the
// agents' peer list and gossip's membership: the peer stops reading the old agent's origin when
// it leaves, and must by then be reading this node's pods from the new one.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request, Agent } from 'undici';
import { stringify } from 'yaml';
import { startSim, type SimServer } from '../shared/sim/server.ts';
import { FakeKubeApiServer, type KubeObject } from './fixtures/kube-apiserver.ts';
import { freeUdpPort, runAgent, stopAgent, type AgentProcess } from './helpers/process.ts';
import { chatBody, MODEL, waitFor } from './helpers/stack.ts';

const NODE = 'node-a';
const PEER_NODE = 'node-b';
/** Requests through this node's agents (kube-proxy's ready endpoints), and through the peer by gossip. */
const REQUESTS = 1_000;
const PEER_REQUESTS = 300;
const GOSSIP_KEY = 'rollout-test-gossip-key-0123456789';

let api: FakeKubeApiServer;
let sims: SimServer[] = [];
let configDir: string;
let gossipPort: number;

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
  configDir = mkdtempSync(join(tmpdir(), 'kinference-rollout-'));
  // Every agent pod binds the same gossip port on its own pod IP, as in the DaemonSet.
  gossipPort = await freeUdpPort();
});
after(async () => {
  await api?.close();
  for (const sim of sims) await sim.close();
});

/** An agent pod of the DaemonSet, as the API holds it, with the process behind it. */
interface AgentPod {
  name: string;
  node: string;
  podIp: string;
  process: AgentProcess;
  ready: boolean;
  terminating: boolean;
}

/** Agent pods the API holds, for the gossip Service's EndpointSlice. */
const agentPods = new Map<string, AgentPod>();

function putAgentPod(pod: AgentPod, ready: boolean, terminating = false): void {
  const { port } = new URL(pod.process.api);
  Object.assign(pod, { ready: ready && !terminating, terminating });
  agentPods.set(pod.name, pod);
  api.put({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: pod.name,
      namespace: 'kinference',
      uid: `uid-${pod.name}`,
      labels: { 'app.kubernetes.io/component': 'agent' },
      annotations: { 'test/api-port': port, 'test/node': pod.node },
      ...(terminating ? { deletionTimestamp: new Date().toISOString() } : {}),
    },
    spec: { nodeName: pod.node, serviceAccountName: 'kinference-agent', containers: [{ name: 'agent' }] },
    status: {
      phase: 'Running',
      podIP: pod.podIp,
      conditions: [{ type: 'Ready', status: pod.ready ? 'True' : 'False' }],
    },
  });
  putGossipSlice();
}

/** The pod is gone (its agent exited): it leaves the API and the EndpointSlice. */
function deleteAgentPod(pod: AgentPod): void {
  agentPods.delete(pod.name);
  api.delete('Pod', 'kinference', pod.name);
  putGossipSlice();
}

/** The EndpointSlice controller for the headless gossip Service (publishNotReadyAddresses: true). */
function putGossipSlice(): void {
  api.put({
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: 'kinference-gossip-x7k2p',
      namespace: 'kinference',
      labels: { 'kubernetes.io/service-name': 'kinference-gossip' },
    },
    addressType: 'IPv4',
    endpoints: [...agentPods.values()].map((p) => ({
      addresses: [p.podIp],
      nodeName: p.node,
      conditions: { ready: true, serving: p.ready, terminating: p.terminating },
    })),
    ports: [{ name: 'gossip', port: gossipPort, protocol: 'UDP' }],
  });
}

/** The projected ServiceAccount token the kubelet would mount for the pod (gossip.tokenBinding). */
function tokenFileFor(name: string, node: string): string {
  const path = join(configDir, `token-${name}`);
  const token = api.tokens.issue({
    namespace: 'kinference',
    serviceAccount: 'kinference-agent',
    audiences: ['kinference-gossip'],
    pod: { name, uid: `uid-${name}` },
    node: { name: node, uid: `uid-${node}` },
  });
  writeFileSync(path, token);
  return path;
}

function configFor(podIp: string, tokenFile: string): string {
  const path = join(configDir, `agent-${podIp}.yaml`);
  writeFileSync(
    path,
    stringify({
      discovery: 'kubernetes',
      listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0', gossip: `${podIp}:${gossipPort}` },
      scrapeInterval: '50ms',
      kubernetes: { kubeconfig: api.kubeconfigPath },
      // Each agent's gossip key is bound to its pod by TokenReview (the stand-in answers it).
      gossip: { key: { env: 'KINFERENCE_GOSSIP_KEY' }, interval: '100ms', tokenBinding: { tokenFile } },
      limits: { drainTimeout: '10s' },
      logLevel: 'error',
    }),
  );
  return path;
}

async function startAgentPod(name: string, podIp: string, node = NODE): Promise<AgentPod> {
  const process_ = await runAgent(configFor(podIp, tokenFileFor(name, node)), {
    ...process.env,
    KINFERENCE_NODE: node,
    KINFERENCE_POD_IP: podIp,
    KINFERENCE_GOSSIP_KEY: GOSSIP_KEY,
  });
  const pod = { name, node, podIp, process: process_, ready: false, terminating: false };
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

test('a rolling update (maxSurge 1, maxUnavailable 0) with gossip on loses none of 1,300 requests', async () => {
  const peer = await startAgentPod('agent-peer', '127.0.0.60', PEER_NODE);
  const old = await startAgentPod('agent-old', '127.0.0.50');
  let fresh: AgentPod | undefined;
  try {
    await rollOut(old, peer, (pod) => (fresh = pod));
  } finally {
    for (const pod of [old, fresh, peer])
      if (pod && pod.process.child.exitCode === null) pod.process.child.kill('SIGKILL');
  }
});

/** This node's agent origins the peer reads, by agent address. */
async function nodeOriginsAtPeer(peer: AgentPod): Promise<string[]> {
  const state = (await (await fetch(`${peer.process.admin}/debug/state`)).json()) as {
    gossip?: { origins: { origin: string; agent: string }[] };
  };
  return (state.gossip?.origins ?? [])
    .filter((o) => o.origin === NODE)
    .map((o) => o.agent)
    .sort();
}

async function send(target: string, client: Agent): Promise<{ outcome: string; route?: string }> {
  try {
    const res = await request(`${target}/v1/chat/completions`, {
      method: 'POST',
      dispatcher: client,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chatBody('roll', { max_tokens: 4 })),
    });
    await res.body.text();
    return { outcome: String(res.statusCode), route: res.headers['x-kinference-route'] as string | undefined };
  } catch (error) {
    return { outcome: (error as { code?: string }).code ?? 'error' };
  }
}

async function rollOut(old: AgentPod, peer: AgentPod, started: (pod: AgentPod) => void): Promise<void> {
  await waitFor(() => probe(old), 10_000, 'the old agent ready');
  await waitFor(() => probe(peer), 10_000, 'the peer agent ready');
  const client = new Agent({ keepAliveTimeout: 1_000 });
  // The peer has this node's pods from gossip once it routes there.
  await waitFor(
    async () => (await send(peer.process.api, client)).route?.startsWith(`peer/${NODE}/`) === true,
    10_000,
    'the peer routing to this node through gossip',
    50,
  );

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
          (p.metadata as { annotations: Record<string, string> }).annotations['test/node'] === NODE &&
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
  // A failed step sets this: every loop below stops, so the failure is reported. Without it the
  // clients went on sending to stopped agents, each refusal a microtask, and the test process spun
  // forever (its timeout never got a turn).
  let abandoned = false;
  let proxying = true;
  const proxy = (async () => {
    while (proxying && !abandoned) {
      await refresh();
      await new Promise((r) => setTimeout(r, 50));
    }
  })();

  const outcomes: Record<string, number> = {};
  const byAgent: Record<string, number> = {};
  let sent = 0;
  const load = Promise.all(
    Array.from({ length: 8 }, async () => {
      while (!abandoned && sent < REQUESTS) {
        sent++;
        const target = endpoints[Math.floor(Math.random() * endpoints.length)];
        const { outcome } = await send(target, client);
        outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
        byAgent[target] = (byAgent[target] ?? 0) + 1;
      }
    }),
  );
  // The peer's clients, sending all through the rollout: every answer must come from this node's
  // pods, found through gossip.
  let rolledOut = false;
  let peerSent = 0;
  const peerOutcomes: Record<string, number> = {};
  const peerLoad = Promise.all(
    Array.from({ length: 2 }, async () => {
      while (!abandoned && (!rolledOut || peerSent < PEER_REQUESTS)) {
        peerSent++;
        const { outcome, route } = await send(peer.process.api, client);
        const key = outcome === '200' && route?.startsWith(`peer/${NODE}/`) ? 'through gossip' : `${outcome} ${route}`;
        peerOutcomes[key] = (peerOutcomes[key] ?? 0) + 1;
      }
    }),
  );

  let fresh: AgentPod;
  try {
    // The DaemonSet controller, once some load is flowing.
    await waitFor(() => sent >= 200, 20_000, 'load before the update');
    fresh = await startAgentPod('agent-new', '127.0.0.51');
    started(fresh);
    await waitFor(() => probe(fresh), 10_000, 'the new agent ready'); // surge: both run now
    await waitFor(() => endpoints.length === 2, 5_000, 'kube-proxy to see both agents');
    // Two origins for this node at the peer, one per agent pod: neither superseded the other.
    await waitFor(
      async () => (await nodeOriginsAtPeer(peer)).length === 2,
      5_000,
      'the peer reading both agents of this node',
      50,
    );
    putAgentPod(old, false, true); // deleted: leaves the endpoints, and gossip's membership
    await new Promise((r) => setTimeout(r, 500)); // preStop pause
    assert.equal(await stopAgent(old.process), 0, 'the old agent drained and exited cleanly');
    deleteAgentPod(old);
    assert.deepEqual(await nodeOriginsAtPeer(peer), [`${fresh.podIp}:${gossipPort}`], 'only the new agent is read');
  } catch (error) {
    abandoned = true;
    await Promise.allSettled([load, peerLoad, proxy]);
    throw error;
  }

  await load;
  rolledOut = true;
  await peerLoad;
  proxying = false;
  await proxy;
  await client.close();
  const bindings = await (await fetch(`${peer.process.admin}/metrics`)).text();
  await stopAgent(fresh.process);
  await stopAgent(peer.process);

  assert.equal(sent >= REQUESTS, true);
  assert.deepEqual(outcomes, { 200: sent }, `every request answered 200: ${JSON.stringify(outcomes)}`);
  assert.equal(Object.keys(byAgent).length, 2, 'both agents served part of the load');
  assert.deepEqual(
    peerOutcomes,
    { 'through gossip': peerSent },
    `the peer's requests: ${JSON.stringify(peerOutcomes)}`,
  );
  // Every agent's key was bound to its pod by a TokenReview before its origin was read (each of
  // the three agents reviewed by at least one other).
  assert.ok(api.tokens.reviews >= 3, `${api.tokens.reviews} TokenReviews`);
  // The peer bound both agents of this node (the old one and the new one).
  assert.match(bindings, /kinference_gossip_key_bindings_total\{verdict="trusted"\} [2-9]/);
}
