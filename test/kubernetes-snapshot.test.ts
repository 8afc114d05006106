// The pure half of Kubernetes discovery: objects → snapshot fields, providers.yaml → settings.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseProviderList, parseProvidersConfigMap } from '../agent/cluster/kubernetes-providers.ts';
import { settingsFromObject } from '../agent/config/load.ts';
import {
  callersByIp,
  modelServerPods,
  namespaceAnnotations,
  peerAddresses,
  gossipMembers,
  policyObjects,
  servingPodsByIp,
  slimPod,
  unroutableReason,
} from '../agent/cluster/kubernetes-snapshot.ts';
import type { EndpointSliceObject, PodObject } from '../agent/cluster/kubernetes-snapshot.ts';

function ready(pod: PodObject): PodObject {
  return {
    ...pod,
    spec: { nodeName: 'n1', ...pod.spec },
    status: { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }], ...pod.status },
  };
}

describe('model-server pods', () => {
  it("takes the server's own concurrency from its command line (vLLM, TGI, SGLang), when given", () => {
    const withArgs = (args: string[]) =>
      ready({
        metadata: {
          name: 'p',
          namespace: 'ns',
          annotations: { 'kinference.io/model': 'm', 'kinference.io/port': '8000' },
        },
        spec: { containers: [{ args }] },
        status: { podIP: '10.0.0.1' },
      });
    assert.equal(modelServerPods([withArgs(['--model', 'x', '--max-num-seqs', '64'])], 'n1')[0].maxConcurrency, 64);
    assert.equal(modelServerPods([withArgs(['--max-concurrent-requests=128'])], 'n1')[0].maxConcurrency, 128);
    assert.equal(modelServerPods([withArgs(['--max-running-requests', '32'])], 'n1')[0].maxConcurrency, 32);
    assert.equal(modelServerPods([withArgs(['--max-num-seqs', 'lots'])], 'n1')[0].maxConcurrency, undefined);
    assert.equal(modelServerPods([withArgs([])], 'n1')[0].maxConcurrency, undefined);
  });

  it('takes KV-event endpoints from the kv-events annotation at the pod IP, and ignores a malformed one', () => {
    const withKv = (value: string, extra: Record<string, string> = {}) =>
      ready({
        metadata: {
          name: 'p',
          namespace: 'ns',
          annotations: {
            'kinference.io/model': 'm',
            'kinference.io/port': '8000',
            'kinference.io/kv-events': value,
            ...extra,
          },
        },
        status: { podIP: '10.0.0.1' },
      });
    assert.deepEqual(
      modelServerPods([withKv('5557,5558', { 'kinference.io/kv-events-topic': 'kv' })], 'n1')[0].kvEvents,
      {
        endpoint: 'tcp://10.0.0.1:5557',
        replayEndpoint: 'tcp://10.0.0.1:5558',
        topic: 'kv',
      },
    );
    assert.deepEqual(modelServerPods([withKv('5557')], 'n1')[0].kvEvents, { endpoint: 'tcp://10.0.0.1:5557' });
    assert.equal(modelServerPods([withKv('5557,x')], 'n1')[0].kvEvents, undefined);
    assert.equal(modelServerPods([withKv('1,2,3')], 'n1')[0].kvEvents, undefined);
  });

  it('brackets IPv6 pod addresses', () => {
    const pod = ready({
      metadata: {
        name: 'p',
        namespace: 'ns',
        uid: 'u1',
        annotations: { 'kinference.io/model': 'm', 'kinference.io/port': '8000' },
      },
      status: { podIP: 'fd00::5' },
    });
    assert.equal(modelServerPods([pod], 'n1')[0].address, '[fd00::5]:8000');
  });

  it('takes the port annotation over a container port named http, and rejects a bad one', () => {
    const pod = ready({
      metadata: {
        name: 'p',
        namespace: 'ns',
        annotations: { 'kinference.io/model': 'm', 'kinference.io/port': '8001' },
      },
      spec: { containers: [{ ports: [{ name: 'http', containerPort: 8000 }] }] },
      status: { podIP: '10.0.0.1' },
    });
    assert.equal(modelServerPods([pod], 'n1')[0].address, '10.0.0.1:8001');
    const bad = {
      ...pod,
      metadata: { ...pod.metadata, annotations: { 'kinference.io/model': 'm', 'kinference.io/port': 'http' } },
    };
    assert.match(unroutableReason(bad) ?? '', /no port/);
    assert.deepEqual(modelServerPods([bad], 'n1'), []);
  });

  it('leaves the engine undefined unless the annotation names a known one', () => {
    const pod = ready({
      metadata: {
        name: 'p',
        annotations: { 'kinference.io/model': 'm', 'kinference.io/port': '1', 'kinference.io/engine': 'triton' },
      },
      status: { podIP: '10.0.0.1' },
    });
    const [found] = modelServerPods([pod], 'n1');
    assert.equal(found.engine, undefined);
    assert.equal(found.uid, 'default/p', 'falls back to namespace/name without a uid');
  });

  it('selects by a configurable pool label', () => {
    const pod = ready({
      metadata: {
        name: 'p',
        namespace: 'ns',
        labels: { 'example.com/llm': 'x' },
        annotations: { 'kinference.io/port': '1' },
      },
      status: { podIP: '10.0.0.1' },
    });
    assert.equal(modelServerPods([pod], 'n1').length, 0);
    assert.deepEqual(modelServerPods([pod], 'n1', 'example.com/llm')[0].models, []);
  });

  it('maps every pod IP of a dual-stack pod to its caller', () => {
    const pod = ready({
      metadata: { name: 'app', namespace: 'team-a' },
      status: { podIP: '10.0.0.1', podIPs: [{ ip: '10.0.0.1' }, { ip: 'fd00::1' }] },
    });
    assert.deepEqual([...callersByIp([pod]).keys()], ['10.0.0.1', 'fd00::1']);
  });

  it("knows callers on every node, but not host-network pods (their IP is the node's)", () => {
    const other = ready({
      metadata: { name: 'ledger', namespace: 'finance' },
      spec: { nodeName: 'n2' },
      status: { podIP: '10.0.1.7' },
    });
    const host = ready({
      metadata: { name: 'exporter', namespace: 'monitoring' },
      spec: { nodeName: 'n1', hostNetwork: true },
      status: { podIP: '192.168.0.1' },
    });
    assert.deepEqual([...callersByIp([other, host])], [['10.0.1.7', { namespace: 'finance', pod: 'ledger' }]]);
  });

  it('slims a pod to what the agent reads, and the slim pod decides the same', () => {
    const full = ready({
      metadata: {
        name: 'vllm-0',
        namespace: 'llm',
        uid: 'u1',
        labels: { 'kinference.io/pool': 'a' },
        annotations: {
          'kinference.io/model': 'm',
          'kubectl.kubernetes.io/last-applied-configuration': 'x'.repeat(5000),
        },
        managedFields: [{ big: 'y'.repeat(5000) }],
      },
      spec: {
        nodeName: 'n1',
        containers: [
          {
            name: 'vllm',
            ports: [
              { name: 'http', containerPort: 8000 },
              { name: 'metrics', containerPort: 9000 },
            ],
          },
        ],
      },
      status: { podIP: '10.0.0.9' },
    });
    const slim = slimPod(full);
    assert.ok(JSON.stringify(slim).length < 600, JSON.stringify(slim));
    assert.deepEqual(modelServerPods([slim], 'n1'), modelServerPods([full], 'n1'));
    assert.deepEqual([...servingPodsByIp([slim])], [['10.0.0.9', { namespace: 'llm', name: 'vllm-0', node: 'n1' }]]);
  });
});

describe('namespaces, policies, peers', () => {
  it('keeps only kinference.io annotations', () => {
    const map = namespaceAnnotations([
      { metadata: { name: 'a', annotations: { 'kinference.io/tenant': 't', 'x/y': 'z' } } },
    ]);
    assert.deepEqual(map.get('a'), { 'kinference.io/tenant': 't' });
  });

  it('strips managedFields from policies and fills apiVersion/kind', () => {
    const [p] = policyObjects([{ metadata: { name: 'p', namespace: 'ns', managedFields: [{}] } }]) as {
      apiVersion: string;
      kind: string;
      metadata: object;
    }[];
    assert.deepEqual(p, {
      apiVersion: 'kinference.io/v1alpha1',
      kind: 'InferencePolicy',
      metadata: { name: 'p', namespace: 'ns' },
    });
  });

  it('builds peer addresses: explicit port wins, own node and FQDN slices left out, IPv6 bracketed', () => {
    const slices: EndpointSliceObject[] = [
      {
        addressType: 'IPv4',
        endpoints: [
          { addresses: ['10.0.0.1'], nodeName: 'n1' },
          { addresses: ['10.0.0.2'], nodeName: 'n2' },
        ],
        ports: [{ name: 'gossip', port: 7000 }],
      },
      {
        addressType: 'IPv6',
        endpoints: [{ addresses: ['fd00::3'], nodeName: 'n3' }],
        ports: [{ name: 'gossip', port: 7000 }],
      },
      { addressType: 'FQDN', endpoints: [{ addresses: ['agent.example.com'] }] },
    ];
    assert.deepEqual(peerAddresses(slices, { node: 'n1' }), ['10.0.0.2:7000', '[fd00::3]:7000']);
    assert.deepEqual(peerAddresses(slices, { node: 'nx', podIP: '10.0.0.2', gossipPort: 7946 }), [
      '10.0.0.1:7946',
      '[fd00::3]:7946',
    ]);
  });

  it("gossip's membership: only agents whose pod is ready (serving; ready where serving is absent)", () => {
    const slices: EndpointSliceObject[] = [
      {
        addressType: 'IPv4',
        endpoints: [
          { addresses: ['10.0.0.1'], nodeName: 'n1', conditions: { ready: true, serving: true } },
          // Published not-ready (the gossip Service's publishNotReadyAddresses): ready is forced true.
          { addresses: ['10.0.0.2'], nodeName: 'n2', conditions: { ready: true, serving: false } },
          { addresses: ['10.0.0.3'], nodeName: 'n3', conditions: { ready: false } },
          { addresses: ['10.0.0.4'], nodeName: 'n4', conditions: { serving: true, terminating: true } },
          { addresses: ['10.0.0.5'], nodeName: 'n5' },
        ],
        ports: [{ name: 'gossip', port: 7946 }],
      },
    ];
    assert.deepEqual(gossipMembers(slices, { node: 'nx' }), ['10.0.0.1:7946', '10.0.0.4:7946', '10.0.0.5:7946']);
    assert.equal(peerAddresses(slices, { node: 'nx' }).length, 5, 'every agent is still a peer to gossip with');
  });
});

describe('providers.yaml', () => {
  const ok = { name: 'db', kind: 'openai', endpoint: 'https://x.example/serving-endpoints', models: { a: 'b' } };

  it('defaults the timeout to 10 s and parses duration strings', () => {
    assert.equal(parseProviderList([ok])[0].timeoutMs, 10_000);
    assert.equal(parseProviderList([{ ...ok, timeout: '2.5s' }])[0].timeoutMs, 2_500);
    assert.equal(parseProviderList({ providers: [{ ...ok, timeout: 750 }] })[0].timeoutMs, 750);
    assert.equal(parseProviderList([{ ...ok, timeoutMs: 1_234 }])[0].timeoutMs, 1_234);
  });

  it('rejects the whole list with a message naming the entry and field', () => {
    const cases: [unknown, RegExp][] = [
      [[{ ...ok, apiKey: 'dapi-123' }], /\[0\] \(db\)\.apiKey: expected \{env: NAME\} or \{file/],
      [[{ ...ok, apiKey: { file: 'relative/path' } }], /apiKey: .*absolute/],
      [[{ ...ok, apikey: { env: 'X' } }], /apikey: unexpected property/],
      [[{ ...ok, endpoint: undefined }], /endpoint: required for kind openai/],
      [[{ name: 'b', kind: 'bedrock', models: { a: 'b' } }], /region: required for kind bedrock/],
      [[ok, ok], /\[1\] \(db\)\.name: duplicate provider "db"/],
      [[{ ...ok, timeout: 'soon' }], /timeout: expected duration/],
      [[{ ...ok, models: {} }], /models: expected a non-empty mapping/],
      [[{ ...ok, credentials: { accessKeyId: { env: 'A' } } }], /secretAccessKey/],
      [{ not: 'a list' }, /expected a list/],
      [[{ ...ok, timeout: '0s' }], /timeout: must be positive/],
      [[{ ...ok, timeout: '1s', timeoutMs: 5 }], /give timeout or timeoutMs, not both/],
    ];
    for (const [value, message] of cases) assert.throws(() => parseProviderList(value), message);
  });

  it('reads a provider the same from the agent config file as from the ConfigMap (one schema)', () => {
    const file = (provider: object) =>
      settingsFromObject(
        {
          node: 'n',
          listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0' },
          pods: [{ name: 'p', address: '127.0.0.1:1', models: ['m'] }],
          providers: [provider],
        },
        'test',
        {},
      );
    for (const entry of [
      ok,
      { ...ok, timeout: '2.5s' },
      { ...ok, timeoutMs: 1_234 },
      { ...ok, apiKey: { file: '/run/key' } },
    ]) {
      assert.deepEqual(file(entry).providers, parseProviderList([entry]));
    }
    for (const entry of [
      { ...ok, apiKey: { file: 'relative/path' } },
      { ...ok, models: {} },
      { ...ok, timeout: '0s' },
      { ...ok, endpoint: undefined },
    ]) {
      assert.throws(() => file(entry), /providers\[0\]/);
      assert.throws(() => parseProviderList([entry]), /providers\[0\]/);
    }
  });

  it('treats a missing key or an empty file as no providers, and reports bad YAML', () => {
    assert.deepEqual(parseProvidersConfigMap(undefined, 'cm'), []);
    assert.deepEqual(parseProvidersConfigMap({ 'providers.yaml': '' }, 'cm'), []);
    assert.throws(
      () => parseProvidersConfigMap({ 'providers.yaml': '- name: [unclosed' }, 'configmap k/p'),
      /configmap k\/p: providers.yaml is not valid YAML/,
    );
  });
});

it('a policy in the agent namespace applies cluster-wide', () => {
  const policies = policyObjects(
    [{ metadata: { name: 'global', namespace: 'kinference' } }, { metadata: { name: 'team', namespace: 'team-a' } }],
    'kinference',
  ) as { metadata: { name: string; namespace: string } }[];
  assert.deepEqual(
    policies.map((p) => `${p.metadata.namespace}/${p.metadata.name}`),
    ['*/global', 'team-a/team'],
  );
});
