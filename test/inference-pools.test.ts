// GIE's InferencePool (inference.networking.k8s.io/v1) as a discovery source, through the
// Kubernetes API server stand-in: the production discovery (kubeconfig, client-node ListWatch)
// over real HTTP on loopback, with pools shaped as GIE's v1 API types define them.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { TestContext } from 'node:test';
import { createKubernetesDiscovery, type KubernetesDiscoveryOptions } from '../agent/cluster/kubernetes.ts';
import { FakeKubeApiServer, type KubeObject } from './fixtures/kube-apiserver.ts';
import { waitFor } from './helpers/wait.ts';

const NODE = 'node-a';

/** A pod as the API server holds it: Running and Ready, with labels and no Kinference markings. */
function pod(
  name: string,
  ip: string,
  labels: Record<string, string>,
  extra: { node?: string; namespace?: string } = {},
) {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: extra.namespace ?? 'inference', labels, annotations: {} },
    spec: { nodeName: extra.node ?? NODE, containers: [{ name: 'vllm', ports: [{ containerPort: 8000 }] }] },
    status: {
      phase: 'Running',
      podIP: ip,
      podIPs: [{ ip }],
      conditions: [{ type: 'Ready', status: 'True' }],
    },
  } satisfies KubeObject;
}

/** An InferencePool as GIE's v1 types define it: selector.matchLabels, one targetPort, an endpoint picker. */
function inferencePool(
  name: string,
  matchLabels: Record<string, string>,
  port: number,
  annotations: Record<string, string> = {},
  namespace = 'inference',
) {
  return {
    apiVersion: 'inference.networking.k8s.io/v1',
    kind: 'InferencePool',
    metadata: { name, namespace, annotations },
    spec: {
      selector: { matchLabels },
      targetPorts: [{ number: port }],
      endpointPickerRef: { name: `${name}-epp`, kind: 'Service', port: { number: 9002 }, failureMode: 'FailClose' },
    },
  } satisfies KubeObject;
}

async function discover(
  t: TestContext,
  seed: (api: FakeKubeApiServer) => void,
  opts: Partial<KubernetesDiscoveryOptions> = {},
) {
  const api = await FakeKubeApiServer.start({ bookmarkIntervalMs: 100 });
  seed(api);
  const discovery = createKubernetesDiscovery({
    nodeName: NODE,
    kubeconfig: api.kubeconfigPath,
    debounceMs: 20,
    syncTimeoutMs: 5000,
    backoff: { initialMs: 50, maxMs: 400 },
    inferencePools: true,
    ...opts,
  });
  t.after(async () => {
    await discovery.stop();
    await api.close();
  });
  await discovery.start();
  assert.equal(discovery.status().synced, true);
  return { api, discovery };
}

describe('InferencePool discovery', () => {
  it("takes the pods a pool selects on this node, on the pool's target port, serving the pool's models", async (t) => {
    const { discovery } = await discover(t, (api) => {
      api.put(
        inferencePool('llama', { app: 'vllm-llama' }, 8000, { 'kinference.io/model': 'llama-3-8b, llama-3-8b-sql' }),
      );
      api.put(pod('vllm-llama-0', '10.0.0.5', { app: 'vllm-llama', 'pod-template-hash': 'abc' }));
      api.put(pod('vllm-llama-1', '10.0.1.5', { app: 'vllm-llama' }, { node: 'node-b' })); // another node
      api.put(pod('vllm-other', '10.0.0.6', { app: 'vllm-other' })); // no pool selects it
      api.put(pod('vllm-llama-x', '10.0.0.7', { app: 'vllm-llama' }, { namespace: 'elsewhere' })); // not the pool's namespace
    });
    const pods = discovery.snapshot().pods;
    assert.deepEqual(
      pods.map((p) => ({ name: p.name, address: p.address, models: p.models })),
      [{ name: 'vllm-llama-0', address: '10.0.0.5:8000', models: ['llama-3-8b', 'llama-3-8b-sql'] }],
    );
    // A gossiped pod anywhere in the cluster is checked against the pools too.
    const peerPods = discovery.snapshot().peerPods;
    assert.equal(peerPods?.kind, 'cluster');
    assert.deepEqual([...(peerPods?.kind === 'cluster' ? peerPods.pods.keys() : [])].sort(), ['10.0.0.5', '10.0.1.5']);
  });

  it('takes the engine from the pool, and a pod adds its own models to the pool’s', async (t) => {
    const { discovery } = await discover(t, (api) => {
      api.put(
        inferencePool('qwen', { app: 'sglang-qwen' }, 30000, {
          'kinference.io/model': 'qwen',
          'kinference.io/engine': 'sglang',
        }),
      );
      const p = pod('sglang-qwen-0', '10.0.0.9', { app: 'sglang-qwen' });
      p.metadata.annotations = { 'kinference.io/model': 'qwen-coder' } as Record<string, string>;
      api.put(p);
    });
    const [found] = discovery.snapshot().pods;
    assert.deepEqual(
      { address: found?.address, engine: found?.engine, models: found?.models },
      { address: '10.0.0.9:30000', engine: 'sglang', models: ['qwen-coder', 'qwen'] },
    );
  });

  it('follows pools and pods as they come, change and go', async (t) => {
    const { api, discovery } = await discover(t, (api) => {
      api.put(pod('vllm-0', '10.0.0.5', { app: 'vllm' }));
    });
    assert.deepEqual(discovery.snapshot().pods, []);
    api.put(inferencePool('llama', { app: 'vllm' }, 8000, { 'kinference.io/model': 'llama-3-8b' }));
    await waitFor(() => discovery.snapshot().pods.length === 1, 3000, 'pool member found');
    api.put(inferencePool('llama', { app: 'vllm' }, 8001, { 'kinference.io/model': 'llama-3-8b' }));
    await waitFor(() => discovery.snapshot().pods[0]?.address === '10.0.0.5:8001', 3000, 'new target port');
    api.put(pod('vllm-1', '10.0.0.6', { app: 'vllm' }));
    await waitFor(() => discovery.snapshot().pods.length === 2, 3000, 'second member');
    api.delete('InferencePool', 'inference', 'llama');
    await waitFor(() => discovery.snapshot().pods.length === 0, 3000, 'pool gone, members gone');
  });

  it('skips a pool whose selector is empty or whose port is out of range', async (t) => {
    const { discovery } = await discover(t, (api) => {
      api.put(inferencePool('empty', {}, 8000, { 'kinference.io/model': 'm' }));
      api.put(inferencePool('badport', { app: 'vllm' }, 70000, { 'kinference.io/model': 'm' }));
      api.put(pod('vllm-0', '10.0.0.5', { app: 'vllm' }));
    });
    assert.deepEqual(discovery.snapshot().pods, []);
  });

  it('reads no InferencePools unless enabled (a cluster without the CRD still syncs)', async (t) => {
    const { api, discovery } = await discover(
      t,
      (api) => {
        api.put(inferencePool('llama', { app: 'vllm' }, 8000, { 'kinference.io/model': 'llama-3-8b' }));
        api.put(pod('vllm-0', '10.0.0.5', { app: 'vllm' }));
      },
      { inferencePools: false },
    );
    assert.deepEqual(discovery.snapshot().pods, []);
    assert.equal(discovery.status().sources.pools, undefined);
    assert.ok(!api.requests.some((r) => r.path.includes('inferencepools')));
  });
});
