// A node dies (its agent SIGKILLed, its model servers gone) while the survivors route to its pods:
// no survivor answers 5xx (a failed attempt goes back through the decision and waits for a pod
// that is only busy), and within 2 s of the death no survivor has the dead node's pods among the
// pods it may choose (pod ejection, then the agents' failure detector and its news).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { Explanation } from '../agent/server/admin/explain.ts';
import { startSim, type SimServer } from '../shared/sim/server.ts';
import { FakeKubeApiServer } from './fixtures/kube-apiserver.ts';
import { freeUdpPort, runAgent, stopAgent, type AgentProcess } from './helpers/process.ts';
import { chatBody, MODEL, postJson, waitFor } from './helpers/stack.ts';
import { gossipIdentities, peerKeysOf } from './helpers/gossip-keys.ts';

const KEY = 'test-gossip-key-0123456789abcdef';

interface Cluster {
  names: string[];
  agents: AgentProcess[];
  sims: SimServer[][];
  close(): Promise<void>;
}

const POLICY_SPEC = {
  slo: { ttft: '5s' },
  exclude: [{ metric: 'queued', above: 1, window: '1s' }],
  wait: { max: '5s' },
};

/**
 * `n` agents on loopback, each with `podsPerNode` small simulated pods, all gossiping with each
 * other. Static: config files list the pods and peers. Kubernetes: the API stand-in holds the
 * model pods (on their nodes) and the agent pods, and the gossip Service's EndpointSlice lists
 * every agent; each node has its own loopback address, as pod IPs.
 */
async function startCluster(n: number, podsPerNode: number, mode: 'static' | 'kubernetes'): Promise<Cluster> {
  const dir = mkdtempSync(join(tmpdir(), 'kinference-death-'));
  const names = Array.from({ length: n }, (_, i) => `node-${String.fromCharCode(97 + i)}`);
  const hostOf = (i: number) => (mode === 'static' ? '127.0.0.1' : `127.0.${i + 1}.1`);
  const sims = await Promise.all(
    names.map((_, i) =>
      Promise.all(
        Array.from({ length: podsPerNode }, (_, j) =>
          startSim({ host: hostOf(i), models: [MODEL], maxSeqs: 2, seed: 10 * i + j, speed: 0.5 }),
        ),
      ),
    ),
  );
  const ports = mode === 'static' ? await Promise.all(names.map(() => freeUdpPort())) : [];
  // Kubernetes: every agent binds the same gossip port on its own pod IP, as in the DaemonSet.
  const gossipPort = mode === 'kubernetes' ? await freeUdpPort() : 0;
  const agentIp = (i: number) => `127.0.${i + 1}.50`;
  const api = mode === 'kubernetes' ? await kubernetesWorld(names, sims, agentIp, gossipPort) : undefined;
  const env = (i: number) => ({
    ...process.env,
    KINFERENCE_GOSSIP_KEY: KEY,
    ...(api ? { KINFERENCE_NODE: names[i], KINFERENCE_POD_IP: agentIp(i) } : {}),
  });
  const ids = gossipIdentities(...names);
  names.forEach((node, i) => {
    // The TTL is long on purpose: what takes the dead node out must be the failure detector.
    const gossip = { key: { env: 'KINFERENCE_GOSSIP_KEY' }, interval: '100ms', ttl: '30s' };
    const config = api
      ? {
          discovery: 'kubernetes',
          listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0', gossip: `${agentIp(i)}:${gossipPort}` },
          scrapeInterval: '50ms',
          kubernetes: { kubeconfig: api.kubeconfigPath },
          gossip,
          logLevel: 'error',
        }
      : {
          node,
          listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0', gossip: `127.0.0.1:${ports[i]}` },
          scrapeInterval: '50ms',
          pods: sims[i].map((sim, j) => ({
            name: `${node}-pod-${j}`,
            namespace: 'inference',
            address: new URL(sim.url).host,
            engine: 'vllm',
            models: [MODEL],
          })),
          peers: ports.filter((_, k) => k !== i).map((p) => `127.0.0.1:${p}`),
          gossip: { ...gossip, identity: ids[node].identity, peerKeys: peerKeysOf(ids) },
          policies: [{ metadata: { name: 'default', namespace: '*' }, spec: POLICY_SPEC }],
        };
    writeFileSync(join(dir, `${node}.yaml`), stringify(config));
  });
  // One at a time, on a loaded machine each start is quicker; one that fails stops those started.
  const agents: AgentProcess[] = [];
  try {
    for (const [i, node] of names.entries())
      agents.push(await runAgent(join(dir, `${node}.yaml`), env(i), { startTimeoutMs: 30_000 }));
  } catch (error) {
    await Promise.all(agents.map((a) => stopAgent(a, 'SIGKILL')));
    for (const s of sims.flat()) await s.close();
    await api?.close();
    throw error;
  }
  return {
    names,
    agents,
    sims,
    async close() {
      await Promise.all(agents.map((a) => stopAgent(a)));
      for (const s of sims.flat()) await s.close();
      await api?.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * The API stand-in as a cluster holds it: the model pods Ready on their nodes, the agent pods,
 * and the gossip Service's EndpointSlice listing every agent. Nothing here changes when a node
 * dies: a lost node's pods stay Ready in the API for tens of seconds.
 */
async function kubernetesWorld(
  names: string[],
  sims: SimServer[][],
  agentIp: (i: number) => string,
  gossipPort: number,
): Promise<FakeKubeApiServer> {
  const api = await FakeKubeApiServer.start();
  api.put({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'kinference' } });
  api.put({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'inference' } });
  api.put({
    apiVersion: 'kinference.io/v1alpha1',
    kind: 'InferencePolicy',
    metadata: { name: 'default', namespace: 'kinference' },
    spec: POLICY_SPEC,
  });
  api.put({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: 'kinference-providers', namespace: 'kinference' },
    data: { 'providers.yaml': '[]' },
  });
  names.forEach((node, i) => {
    sims[i].forEach((sim, j) => {
      const { hostname, port } = new URL(sim.url);
      api.put({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: {
          name: `${node}-pod-${j}`,
          namespace: 'inference',
          annotations: { 'kinference.io/model': MODEL, 'kinference.io/engine': 'vllm', 'kinference.io/port': port },
        },
        spec: { nodeName: node, containers: [{ name: 'main' }] },
        status: {
          phase: 'Running',
          podIP: hostname,
          podIPs: [{ ip: hostname }],
          conditions: [{ type: 'Ready', status: 'True' }],
        },
      });
    });
    api.put({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: `agent-${node}`, namespace: 'kinference', labels: { 'app.kubernetes.io/component': 'agent' } },
      spec: { nodeName: node, containers: [{ name: 'agent' }] },
      status: { phase: 'Running', podIP: agentIp(i), conditions: [{ type: 'Ready', status: 'True' }] },
    });
  });
  api.put({
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: 'kinference-gossip-x7k2p',
      namespace: 'kinference',
      labels: { 'kubernetes.io/service-name': 'kinference-gossip' },
    },
    addressType: 'IPv4',
    endpoints: names.map((node, i) => ({
      addresses: [agentIp(i)],
      nodeName: node,
      conditions: { ready: true, serving: true, terminating: false },
    })),
    ports: [{ name: 'gossip', port: gossipPort, protocol: 'UDP' }],
  });
  return api;
}

const explain = async (agent: AgentProcess) =>
  (await (await fetch(`${agent.admin}/explain?model=${MODEL}`)).json()) as Explanation;

/** The pods an agent may choose now (those that passed every filter), by route name. */
const choosable = async (agent: AgentProcess) => (await explain(agent)).candidates.map((c) => c.pod);

async function nodeDeath(n: number, mode: 'static' | 'kubernetes'): Promise<void> {
  const cluster = await startCluster(n, 2, mode);
  let stop = false;
  let clients: Promise<void>[] = [];
  let held: ReturnType<SimServer['engine']['submit']>[] = [];
  const release = () => {
    for (const h of held) if (h.accepted) h.seq.abort();
  };
  try {
    const [dead, ...survivors] = [cluster.agents.at(-1)!, ...cluster.agents.slice(0, -1)];
    const deadNode = cluster.names.at(-1)!;
    for (const agent of survivors) {
      await waitFor(
        async () => (await explain(agent)).candidates.length + (await explain(agent)).dropped.length === 2 * n,
        15_000,
        'every pod known at every survivor',
      );
    }
    const statuses: { status: number; at: number; route: string }[] = [];
    let died = Infinity;
    // Outside traffic fills every survivor's pods (excluded: queued above 1), so their agents send
    // to the dead node's pods; it ends half a second after the death, so a request whose pod died
    // has a pod to wait for. Two clients per survivor stream short answers back to back.
    held = cluster.sims
      .slice(0, -1)
      .flat()
      .flatMap((sim) => Array.from({ length: 6 }, () => sim.engine.submit({ promptTokens: 100, maxTokens: 100_000 })));
    // Clients start once every survivor sees its own pods full, so none queues behind the held load.
    for (const agent of survivors) {
      await waitFor(
        async () => (await explain(agent)).dropped.filter((d) => d.pod.startsWith('local/')).length === 2,
        15_000,
        "the survivors' own pods excluded",
      );
    }
    const client = async (agent: AgentProcess) => {
      while (!stop) {
        try {
          const response = await postJson(
            `${agent.api}/v1/chat/completions`,
            chatBody('hi', { stream: true, max_tokens: 8 }),
          );
          await response.text();
          statuses.push({
            status: response.status,
            at: performance.now(),
            route: response.headers.get('x-kinference-route') ?? '',
          });
        } catch (error) {
          // A connection closed without an answer is a failure too (status 0), and says whether the agent died.
          const exited = agent.child.exitCode !== null || agent.child.signalCode !== null;
          statuses.push({
            status: 0,
            at: performance.now(),
            route: `${(error as Error).message}; agent exited: ${exited}`,
          });
          if (exited) throw new Error(`a survivor exited:\n${agent.output().slice(-3000)}`, { cause: error });
        }
      }
    };
    clients = survivors.flatMap((a) => Array.from({ length: 2 }, () => client(a)));
    await waitFor(
      () => statuses.some((s) => s.route.startsWith(`peer/${deadNode}/`)),
      8000,
      `a request served by ${deadNode} before it dies`,
    );
    await stopAgent(dead, 'SIGKILL');
    await Promise.all(cluster.sims.at(-1)!.map((s) => s.close()));
    died = performance.now();
    setTimeout(release, 500);
    // Whether any survivor may still choose a dead pod, checked until 3 s after the death.
    let lastChoosable = -1;
    while (performance.now() - died < 3000) {
      for (const agent of survivors) {
        if ((await choosable(agent)).some((p) => p.startsWith(`peer/${deadNode}/`)))
          lastChoosable = performance.now() - died;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    stop = true;
    await Promise.all(clients);
    const afterDeath = statuses.filter((s) => s.at >= died);
    const failed = statuses.filter((s) => s.status >= 500 || s.status === 0);
    assert.ok(afterDeath.length >= 4, `requests kept flowing (${afterDeath.length})`);
    assert.deepEqual(failed, [], 'no 5xx from a survivor');
    assert.ok(
      lastChoosable <= 2000,
      `the dead node's pods were choosable ${Math.round(lastChoosable)} ms after the death`,
    );
  } finally {
    stop = true;
    release();
    await Promise.allSettled(clients);
    await cluster.close();
  }
}

describe('a node dies while the survivors route to its pods', () => {
  for (const mode of ['static', 'kubernetes'] as const) {
    it(`two agents (${mode}): no 5xx, and the dead pods out of every decision within 2 s`, () => nodeDeath(2, mode));
    it(`three agents (${mode}): no 5xx, and the dead pods out of every decision within 2 s`, () => nodeDeath(3, mode));
  }
});
