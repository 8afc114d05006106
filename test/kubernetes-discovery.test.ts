// Kubernetes discovery against the API server stand-in: the production code path (kubeconfig file,
// client-node ListWatch, our watch transport) over real HTTP on loopback.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { TestContext } from 'node:test';
import { createKubernetesDiscovery } from '../agent/cluster/kubernetes.ts';
import type { KubernetesDiscovery, KubernetesDiscoveryOptions } from '../agent/cluster/kubernetes.ts';
import type { ObjectMeta } from '../agent/cluster/kubernetes-snapshot.ts';
import { FakeKubeApiServer } from './fixtures/kube-apiserver.ts';
import type { FakeKubeApiServerOptions, KubeObject } from './fixtures/kube-apiserver.ts';
import { waitFor } from './helpers/wait.ts';

const NODE = 'node-a';
const AGENT_IP = '10.1.0.10';

/** What a test says about a pod; the rest of the object is filled in as the API server would. */
interface PodSpec extends Pick<ObjectMeta, 'labels' | 'annotations'> {
  node?: string;
  ip?: string;
  ready?: boolean;
  phase?: string;
  httpPort?: number;
  hostNetwork?: boolean;
  terminating?: boolean;
}

function pod(namespace: string, name: string, spec: PodSpec = {}): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      namespace,
      labels: spec.labels ?? {},
      annotations: spec.annotations ?? {},
      ...(spec.terminating ? { deletionTimestamp: '2026-01-01T00:00:00Z' } : {}),
    },
    spec: {
      nodeName: spec.node ?? NODE,
      ...(spec.hostNetwork ? { hostNetwork: true } : {}),
      containers: [{ name: 'main', ports: spec.httpPort ? [{ name: 'http', containerPort: spec.httpPort }] : [] }],
    },
    status: {
      phase: spec.phase ?? 'Running',
      ...(spec.ip ? { podIP: spec.ip, podIPs: [{ ip: spec.ip }] } : {}),
      conditions: [{ type: 'Ready', status: spec.ready === false ? 'False' : 'True' }],
    },
  };
}

function modelServer(name: string, ip: string, extra: PodSpec = {}): KubeObject {
  return pod('inference', name, {
    ip,
    labels: { 'kinference.io/pool': 'llama' },
    annotations: { 'kinference.io/model': 'llama-3-8b', 'kinference.io/engine': 'vllm', 'kinference.io/port': '8000' },
    ...extra,
  });
}

function namespace(name: string, annotations: Record<string, string> = {}): KubeObject {
  return { apiVersion: 'v1', kind: 'Namespace', metadata: { name, annotations } };
}

function policy(ns: string, name: string, spec: Record<string, unknown>): KubeObject {
  return { apiVersion: 'kinference.io/v1alpha1', kind: 'InferencePolicy', metadata: { name, namespace: ns }, spec };
}

function providersConfigMap(yaml: string): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: 'kinference-providers', namespace: 'kinference' },
    data: { 'providers.yaml': yaml },
  };
}

function gossipSlice(
  name: string,
  endpoints: { ip: string; node: string; ready?: boolean }[],
  service = 'kinference-gossip',
): KubeObject {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name, namespace: 'kinference', labels: { 'kubernetes.io/service-name': service } },
    addressType: 'IPv4',
    endpoints: endpoints.map((e) => ({ addresses: [e.ip], nodeName: e.node, conditions: { ready: e.ready ?? true } })),
    ports: [{ name: 'gossip', port: 7946, protocol: 'UDP' }],
  };
}

const PROVIDERS_YAML = `
- name: bedrock
  kind: bedrock
  region: us-east-1
  models: {llama-3-8b: "meta.llama3-1-8b-instruct-v1:0"}
  credentials:
    accessKeyId: {file: /var/run/secrets/kinference/kinference-providers/aws-access-key-id}
    secretAccessKey: {file: /var/run/secrets/kinference/kinference-providers/aws-secret-access-key}
  timeout: 10s
- name: databricks
  kind: openai
  endpoint: https://example.cloud.databricks.com/serving-endpoints
  models: {llama-3-8b: databricks-meta-llama-3-1-8b-instruct}
  apiKey: {env: DATABRICKS_TOKEN}
`;

interface Harness {
  api: FakeKubeApiServer;
  discovery: KubernetesDiscovery;
  changes: () => number;
  lists: (path?: string) => number;
}

const FAST: Partial<KubernetesDiscoveryOptions> = {
  debounceMs: 50,
  backoff: { initialMs: 50, maxMs: 400 },
  watch: { idleTimeoutMs: 800, connectTimeoutMs: 2000, timeoutSeconds: 60 },
  syncTimeoutMs: 5000,
};

async function harness(
  t: TestContext,
  seed: (api: FakeKubeApiServer) => void,
  opts: Partial<KubernetesDiscoveryOptions> = {},
  apiOpts: FakeKubeApiServerOptions = { bookmarkIntervalMs: 100 },
): Promise<Harness> {
  const api = await FakeKubeApiServer.start(apiOpts);
  seed(api);
  const discovery = createKubernetesDiscovery({
    nodeName: NODE,
    podIP: AGENT_IP,
    kubeconfig: api.kubeconfigPath,
    ...FAST,
    ...opts,
  });
  let changes = 0;
  discovery.onChange(() => changes++);
  t.after(async () => {
    await discovery.stop();
    await api.close();
  });
  await discovery.start();
  assert.deepEqual(
    { synced: discovery.status().synced, connected: discovery.status().connected },
    { synced: true, connected: true },
  );
  return {
    api,
    discovery,
    changes: () => changes,
    lists: (path) => api.requests.filter((r) => !r.watch && (path === undefined || r.path === path)).length,
  };
}

function podNames(d: KubernetesDiscovery): string[] {
  return d.snapshot().pods.map((p) => `${p.namespace}/${p.name}`);
}

describe('kubernetes discovery', () => {
  it('finds the routable model-server pods on its own node and ignores every other node', async (t) => {
    const { discovery, api } = await harness(t, (api) => {
      api.put(modelServer('llama-0', '10.1.0.20'));
      api.put(
        pod('inference', 'llama-1', {
          ip: '10.1.0.21',
          labels: { 'kinference.io/pool': 'llama' },
          annotations: { 'kinference.io/model': 'llama-3-8b, llama-3-70b' },
          httpPort: 8080,
        }),
      );
      api.put(modelServer('remote-0', '10.2.0.20', { node: 'node-b' }));
      api.put(modelServer('warming-0', '10.1.0.22', { ready: false }));
      api.put(modelServer('leaving-0', '10.1.0.23', { terminating: true }));
      api.put(modelServer('pending-0', '', { phase: 'Pending' }));
      api.put(pod('team-a', 'app', { ip: '10.1.0.30' }));
    });
    const pods = discovery.snapshot().pods;
    assert.deepEqual(
      pods.map((p) => ({ ...p, uid: typeof p.uid })),
      [
        {
          uid: 'string',
          name: 'llama-0',
          namespace: 'inference',
          node: NODE,
          address: '10.1.0.20:8000',
          models: ['llama-3-8b'],
          engine: 'vllm',
        },
        {
          uid: 'string',
          name: 'llama-1',
          namespace: 'inference',
          node: NODE,
          address: '10.1.0.21:8080',
          models: ['llama-3-8b', 'llama-3-70b'],
        },
      ],
    );
    assert.equal(pods[0].uid, api.get('Pod', 'inference', 'llama-0')?.metadata.uid);
    const podRequests = api.requests.filter((r) => r.path === '/api/v1/pods');
    assert.ok(podRequests.length >= 2);
    // Cluster-wide (callers and peer pods live on every node); model servers still only from this node.
    for (const r of podRequests)
      assert.equal(r.query.fieldSelector, undefined, "every node's pods are listed and watched");
    // A routable model server on another node is what a peer may announce; an app pod is not.
    const peerPods = discovery.snapshot().peerPods;
    assert.equal(peerPods?.kind, 'cluster');
    if (peerPods?.kind === 'cluster')
      assert.deepEqual(peerPods.pods.get('10.2.0.20'), { namespace: 'inference', name: 'remote-0', node: 'node-b' });
    if (peerPods?.kind === 'cluster') assert.equal(peerPods.pods.get('10.1.0.30'), undefined);
  });

  it('names every caller in the cluster by pod IP, except host-network and finished pods', async (t) => {
    const { discovery } = await harness(t, (api) => {
      api.put(pod('team-a', 'app-0', { ip: '10.1.0.30' }));
      api.put(pod('team-b', 'app-1', { ip: '10.1.0.31', ready: false }));
      api.put(pod('kube-system', 'proxy', { ip: '192.168.0.5', hostNetwork: true }));
      api.put(pod('team-a', 'job-done', { ip: '10.1.0.32', phase: 'Succeeded' }));
      api.put(pod('team-c', 'elsewhere', { ip: '10.2.0.30', node: 'node-b' }));
    });
    assert.deepEqual(
      [...discovery.snapshot().callers],
      [
        ['10.1.0.30', { namespace: 'team-a', pod: 'app-0' }],
        ['10.1.0.31', { namespace: 'team-b', pod: 'app-1' }],
        ['10.2.0.30', { namespace: 'team-c', pod: 'elsewhere' }],
      ],
    );
  });

  it('reads namespace annotations, InferencePolicies, providers and gossip peers', async (t) => {
    const { discovery } = await harness(t, (api) => {
      api.put(
        namespace('team-a', {
          'kinference.io/overflow': 'deny',
          'kinference.io/ttft-slo': '800ms',
          'kubectl.kubernetes.io/last-applied-configuration': '{}',
        }),
      );
      api.put(namespace('team-b'));
      api.put(policy('team-a', 'strict', { models: ['llama-3-8b'], slo: { ttft: '500ms' } }));
      api.put(policy('kinference', 'default', { overflow: { providers: ['bedrock'] } }));
      api.put(providersConfigMap(PROVIDERS_YAML));
      api.put(
        gossipSlice('kinference-gossip-abc', [
          { ip: AGENT_IP, node: NODE },
          { ip: '10.2.0.10', node: 'node-b' },
          { ip: '10.3.0.10', node: 'node-c', ready: false },
        ]),
      );
      api.put(gossipSlice('other-xyz', [{ ip: '10.9.0.1', node: 'node-z' }], 'something-else'));
    });
    const snap = discovery.snapshot();
    assert.deepEqual(
      [...snap.namespaces],
      [
        ['team-a', { 'kinference.io/overflow': 'deny', 'kinference.io/ttft-slo': '800ms' }],
        ['team-b', {}],
      ],
    );
    const policies = snap.policies as {
      apiVersion: string;
      kind: string;
      metadata: { name: string; namespace: string };
      spec: unknown;
    }[];
    // The policy in the agent's namespace (kinference) is cluster-wide.
    assert.deepEqual(
      policies.map((p) => [p.apiVersion, p.kind, `${p.metadata.namespace}/${p.metadata.name}`]),
      [
        ['kinference.io/v1alpha1', 'InferencePolicy', '*/default'],
        ['kinference.io/v1alpha1', 'InferencePolicy', 'team-a/strict'],
      ],
    );
    assert.deepEqual(policies[1].spec, { models: ['llama-3-8b'], slo: { ttft: '500ms' } });
    assert.deepEqual(snap.providers, [
      {
        name: 'bedrock',
        kind: 'bedrock',
        region: 'us-east-1',
        models: { 'llama-3-8b': 'meta.llama3-1-8b-instruct-v1:0' },
        timeoutMs: 10_000,
        credentials: {
          accessKeyId: { file: '/var/run/secrets/kinference/kinference-providers/aws-access-key-id' },
          secretAccessKey: { file: '/var/run/secrets/kinference/kinference-providers/aws-secret-access-key' },
        },
      },
      {
        name: 'databricks',
        kind: 'openai',
        endpoint: 'https://example.cloud.databricks.com/serving-endpoints',
        models: { 'llama-3-8b': 'databricks-meta-llama-3-1-8b-instruct' },
        apiKey: { env: 'DATABRICKS_TOKEN' },
        timeoutMs: 10_000,
      },
    ]);
    assert.deepEqual(
      snap.peers,
      ['10.2.0.10:7946', '10.3.0.10:7946'],
      'own address excluded, not-ready agents included',
    );
  });

  it('follows adds, updates and deletes of every source within a second', async (t) => {
    const { api, discovery, changes } = await harness(t, () => {});
    const cases: [string, () => void, () => boolean][] = [
      [
        'pod added',
        () => api.put(modelServer('llama-0', '10.1.0.20')),
        () => podNames(discovery).includes('inference/llama-0'),
      ],
      [
        'pod updated',
        () =>
          api.put(
            modelServer('llama-0', '10.1.0.20', {
              annotations: { 'kinference.io/model': 'mistral-7b', 'kinference.io/port': '8000' },
            }),
          ),
        () => discovery.snapshot().pods[0]?.models[0] === 'mistral-7b',
      ],
      [
        'pod turned not ready',
        () => api.put(modelServer('llama-0', '10.1.0.20', { ready: false })),
        () => discovery.snapshot().pods.length === 0,
      ],
      [
        'pod ready again',
        () => api.put(modelServer('llama-0', '10.1.0.20')),
        () => discovery.snapshot().pods.length === 1,
      ],
      [
        'pod deleted',
        () => api.delete('Pod', 'inference', 'llama-0'),
        () => discovery.snapshot().pods.length === 0 && !discovery.snapshot().callers.has('10.1.0.20'),
      ],
      [
        'caller added',
        () => api.put(pod('team-a', 'app', { ip: '10.1.0.30' })),
        () => discovery.snapshot().callers.get('10.1.0.30')?.namespace === 'team-a',
      ],
      [
        'namespace annotated',
        () => api.put(namespace('team-a', { 'kinference.io/overflow': 'allow' })),
        () => discovery.snapshot().namespaces.get('team-a')?.['kinference.io/overflow'] === 'allow',
      ],
      [
        'policy added',
        () => api.put(policy('team-a', 'p', { wait: { max: '2s' } })),
        () => discovery.snapshot().policies.length === 1,
      ],
      [
        'policy deleted',
        () => api.delete('InferencePolicy', 'team-a', 'p'),
        () => discovery.snapshot().policies.length === 0,
      ],
      [
        'providers added',
        () => api.put(providersConfigMap(PROVIDERS_YAML)),
        () => discovery.snapshot().providers.length === 2,
      ],
      [
        'providers removed',
        () => api.delete('ConfigMap', 'kinference', 'kinference-providers'),
        () => discovery.snapshot().providers.length === 0,
      ],
      [
        'peer joined',
        () => api.put(gossipSlice('g-1', [{ ip: '10.2.0.10', node: 'node-b' }])),
        () => discovery.snapshot().peers.length === 1,
      ],
      ['peer left', () => api.put(gossipSlice('g-1', [])), () => discovery.snapshot().peers.length === 0],
    ];
    for (const [what, act, seen] of cases) {
      const before = changes();
      act();
      await waitFor(() => seen() && changes() > before, 1000, what);
    }
  });

  it('does not signal a change when nothing the agent uses changed', async (t) => {
    const { api, discovery, changes } = await harness(t, (api) => api.put(modelServer('llama-0', '10.1.0.20')));
    const before = changes();
    const snapshot = discovery.snapshot();
    api.put(modelServer('llama-0', '10.1.0.20', { labels: { 'kinference.io/pool': 'llama', unrelated: 'x' } }));
    api.put(namespace('team-a', { 'example.com/owner': 'someone' }));
    api.put(namespace('team-a', { 'example.com/owner': 'someone-else' }));
    await waitFor(() => discovery.snapshot().namespaces.has('team-a'), 1000, 'namespace seen');
    const afterNamespace = changes();
    api.put(namespace('team-a', { 'example.com/owner': 'a-third' }));
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(changes(), afterNamespace, 'an annotation that is not ours changes nothing');
    assert.equal(afterNamespace, before + 1, 'only the new namespace was a change');
    assert.deepEqual(discovery.snapshot().pods, snapshot.pods);
  });

  it('keeps the last good providers when providers.yaml turns invalid, and says why', async (t) => {
    const { api, discovery } = await harness(t, (api) => api.put(providersConfigMap(PROVIDERS_YAML)));
    api.put(providersConfigMap('- name: broken\n  kind: carrier-pigeon\n  models: {a: b}\n'));
    await waitFor(() => discovery.status().problems.length === 1, 1000, 'problem reported');
    assert.match(discovery.status().problems[0], /carrier-pigeon|kind/);
    assert.equal(discovery.snapshot().providers.length, 2);
    assert.equal(discovery.status().connected, true);
    api.put(providersConfigMap(PROVIDERS_YAML.split('- name: databricks')[0]));
    await waitFor(
      () => discovery.snapshot().providers.length === 1 && discovery.status().problems.length === 0,
      1000,
      'fixed',
    );
  });

  it('resumes dropped watches from their resourceVersion, without relisting', async (t) => {
    const { api, discovery, lists } = await harness(t, () => {});
    const listed = lists();
    api.dropWatches();
    api.put(modelServer('llama-0', '10.1.0.20'));
    await waitFor(() => podNames(discovery).length === 1, 1000, 'pod after drop');
    await waitFor(() => api.watchCount() === 5, 1000, 'watches back');
    assert.equal(lists(), listed, 'no relist after a clean close');
    const resumed = api.requests.filter((r) => r.watch && r.path === '/api/v1/pods').at(-1);
    assert.ok(Number(resumed?.query.resourceVersion) > 0, 'the new watch starts at the last resourceVersion');
  });

  it('resumes a silently stalled watch after the idle timeout and replays what it missed', async (t) => {
    const { api, discovery, lists } = await harness(t, () => {});
    const listed = lists();
    api.stallWatches();
    api.put(modelServer('llama-0', '10.1.0.20'));
    api.put(namespace('team-a', { 'kinference.io/overflow': 'deny' }));
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(discovery.snapshot().pods.length, 0, 'the stalled watch delivers nothing');
    // idleTimeoutMs is 800 in these tests; healthy watches get bookmarks every 100 ms and stay up.
    await waitFor(
      () => podNames(discovery).length === 1 && discovery.snapshot().namespaces.has('team-a'),
      2500,
      'replayed after the idle timeout',
    );
    assert.equal(lists(), listed, 'resumed, not relisted');
    assert.equal(discovery.status().connected, true);
  });

  for (const goneAs of ['event', 'http'] as const) {
    it(`relists after 410 Gone (${goneAs === 'event' ? 'ERROR event' : 'HTTP 410'}) and drops what was deleted meanwhile`, async (t) => {
      const { api, discovery, lists } = await harness(t, (api) => {
        api.goneAs = goneAs;
        api.put(modelServer('llama-0', '10.1.0.20'));
        api.put(policy('team-a', 'p', {}));
      });
      assert.equal(discovery.snapshot().pods.length, 1);
      api.stallWatches();
      api.delete('Pod', 'inference', 'llama-0');
      api.put(modelServer('llama-1', '10.1.0.21'));
      api.delete('InferencePolicy', 'team-a', 'p');
      api.compact();
      const listed = lists('/api/v1/pods');
      api.dropWatches();
      await waitFor(
        () => podNames(discovery).join() === 'inference/llama-1' && discovery.snapshot().policies.length === 0,
        1000,
        'relisted view',
      );
      assert.ok(lists('/api/v1/pods') > listed, 'pods were relisted');
      const podLists = api.requests.filter((r) => !r.watch && r.path === '/api/v1/pods');
      assert.equal(podLists[0].query.resourceVersion, '0', 'the first list is served from the watch cache');
      assert.equal(
        podLists.at(-1)?.query.resourceVersionMatch,
        'NotOlderThan',
        'a relist never goes back before what was seen',
      );
      assert.ok(Number(podLists.at(-1)?.query.resourceVersion) > 0);
      assert.equal(discovery.status().connected, true, '410 is routine, not an outage');
    });
  }

  for (const fault of ['refused connections', 'HTTP 500'] as const) {
    it(`keeps the last view while the API server is down (${fault}), reports it, and catches up after`, async (t) => {
      const { api, discovery } = await harness(t, (api) => {
        api.put(modelServer('llama-0', '10.1.0.20'));
        api.put(gossipSlice('g-1', [{ ip: '10.2.0.10', node: 'node-b' }]));
      });
      const before = discovery.snapshot();
      if (fault === 'refused connections') api.refuseConnections();
      else api.failRequests(500);
      await waitFor(() => !discovery.status().connected, 2000, 'disconnected');
      const status = discovery.status();
      assert.equal(status.synced, true);
      assert.ok(status.lastError, 'lastError says what failed');
      if (fault === 'HTTP 500') assert.match(status.lastError, /500/);
      // Changes made while the agent cannot see them:
      api.delete('Pod', 'inference', 'llama-0');
      api.put(modelServer('llama-1', '10.1.0.21'));
      await new Promise((r) => setTimeout(r, 600));
      assert.equal(discovery.snapshot(), before, 'the last view is kept, untouched');
      api.restore();
      await waitFor(
        () => discovery.status().connected && podNames(discovery).join() === 'inference/llama-1',
        3000,
        'reconnected and caught up',
      );
      assert.equal(discovery.status().lastError, undefined);
      assert.deepEqual(discovery.snapshot().peers, ['10.2.0.10:7946']);
    });
  }

  it('waits for the API server at start, then syncs once it answers', async (t) => {
    const api = await FakeKubeApiServer.start({ bookmarkIntervalMs: 100 });
    api.put(modelServer('llama-0', '10.1.0.20'));
    api.refuseConnections();
    const discovery = createKubernetesDiscovery({
      nodeName: NODE,
      kubeconfig: api.kubeconfigPath,
      ...FAST,
      syncTimeoutMs: 300,
    });
    t.after(async () => {
      await discovery.stop();
      await api.close();
    });
    await discovery.start();
    assert.deepEqual(
      { synced: discovery.status().synced, connected: discovery.status().connected },
      { synced: false, connected: false },
    );
    assert.deepEqual(discovery.snapshot().pods, []);
    let changed = false;
    discovery.onChange(() => (changed = true));
    api.restore();
    await waitFor(() => discovery.status().synced && changed, 3000, 'synced');
    assert.deepEqual(podNames(discovery), ['inference/llama-0']);
  });

  it('follows continue tokens when the API server pages a list', async (t) => {
    const { api, discovery } = await harness(
      t,
      (api) => {
        for (let i = 0; i < 7; i++) api.put(namespace(`ns-${i}`, { 'kinference.io/tenant': `t${i}` }));
      },
      { list: { pageSize: 3 } },
    );
    assert.equal(discovery.snapshot().namespaces.size, 7);
    const pages = api.requests.filter((r) => !r.watch && r.path === '/api/v1/namespaces');
    assert.equal(pages.length, 3);
    assert.deepEqual(
      pages.map((r) => r.query.resourceVersion),
      ['0', undefined, undefined],
    );
  });

  it('stops every watch on stop()', async (t) => {
    const { api, discovery } = await harness(t, () => {});
    await waitFor(() => api.watchCount() === 5, 1000, 'watching');
    await discovery.stop();
    await waitFor(() => api.watchCount() === 0, 1000, 'watches closed');
    const requests = api.requests.length;
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(api.requests.length, requests, 'nothing restarts after stop()');
  });
});
