// What the cluster-wide pods informer costs at 10,000 pods: memory of full pod objects as the API
// serves them (managed fields, env, volumes, status) versus the slim copies the agent keeps, the
// caller and peer-pod indexes built from them, and the time to rebuild those on a change.
//   node --expose-gc bench/pods-memory.ts [count]
import type { PodObject } from '../agent/cluster/kubernetes-snapshot.ts';
import { callersByIp, servingPodsByIp, slimPod } from '../agent/cluster/kubernetes-snapshot.ts';

const COUNT = Number(process.argv[2] ?? 10_000);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc');

/** A pod shaped like a typical Deployment's, serialised and parsed as the informer would get it. */
function realisticPod(i: number): PodObject {
  const ns = `team-${i % 200}`;
  const modelServer = i % 50 === 0;
  const pod = {
    metadata: {
      name: `web-${i.toString(36)}-7c9f8d6b5-x${(i * 7919).toString(36)}`,
      namespace: ns,
      uid: `0000${i.toString(16).padStart(8, '0')}-4b1c-4d2e-9f3a-5c6d7e8f9a0b`,
      resourceVersion: String(100000 + i),
      labels: {
        app: `web-${i % 500}`,
        'pod-template-hash': '7c9f8d6b5',
        ...(modelServer ? { 'kinference.io/pool': 'llama' } : {}),
      },
      annotations: {
        'kubectl.kubernetes.io/restartedAt': '2026-11-30T10:00:00Z',
        'prometheus.io/scrape': 'true',
        ...(modelServer ? { 'kinference.io/model': 'llama-3-8b' } : {}),
      },
      ownerReferences: [
        { apiVersion: 'apps/v1', kind: 'ReplicaSet', name: `web-${i}-7c9f8d6b5`, uid: 'abc', controller: true },
      ],
      managedFields: [
        {
          manager: 'kube-controller-manager',
          operation: 'Update',
          apiVersion: 'v1',
          fieldsType: 'FieldsV1',
          fieldsV1: {
            'f:metadata': { 'f:labels': { '.': {}, 'f:app': {} } },
            'f:spec': { 'f:containers': { 'k:{"name":"app"}': { '.': {}, 'f:image': {}, 'f:env': {} } } },
          },
        },
      ],
    },
    spec: {
      nodeName: `node-${i % 100}`,
      serviceAccountName: 'default',
      containers: [
        {
          name: 'app',
          image: 'registry.example.com/team/web:1.42.0',
          ports: [{ name: 'http', containerPort: 8080, protocol: 'TCP' }],
          env: Array.from({ length: 12 }, (_, k) => ({ name: `SETTING_${k}`, value: `value-${k}-${i}` })),
          resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { cpu: '1', memory: '512Mi' } },
          volumeMounts: [
            { name: 'kube-api-access', mountPath: '/var/run/secrets/kubernetes.io/serviceaccount', readOnly: true },
          ],
        },
      ],
      volumes: [
        {
          name: 'kube-api-access',
          projected: {
            sources: [
              { serviceAccountToken: { path: 'token', expirationSeconds: 3607 } },
              { configMap: { name: 'kube-root-ca.crt' } },
            ],
          },
        },
      ],
      tolerations: [
        { key: 'node.kubernetes.io/not-ready', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 },
      ],
    },
    status: {
      phase: 'Running',
      podIP: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`,
      podIPs: [{ ip: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}` }],
      hostIP: `192.168.${(i % 100) >> 8}.${i % 100}`,
      conditions: ['Initialized', 'Ready', 'ContainersReady', 'PodScheduled'].map((type) => ({
        type,
        status: 'True',
        lastTransitionTime: '2026-11-30T10:00:00Z',
      })),
      containerStatuses: [
        {
          name: 'app',
          ready: true,
          restartCount: 0,
          image: 'registry.example.com/team/web:1.42.0',
          imageID: 'sha256:' + 'a'.repeat(64),
          containerID: 'containerd://' + 'b'.repeat(64),
          started: true,
          state: { running: { startedAt: '2026-11-30T10:00:00Z' } },
        },
      ],
    },
  };
  return JSON.parse(JSON.stringify(pod)) as PodObject;
}

function retained<T>(build: () => T): { value: T; mb: number } {
  gc!();
  const before = process.memoryUsage().heapUsed;
  const value = build();
  gc!();
  return { value, mb: (process.memoryUsage().heapUsed - before) / 1024 / 1024 };
}

const full = retained(() => Array.from({ length: COUNT }, (_, i) => realisticPod(i)));
const slim = retained(() => full.value.map(slimPod));
const indexes = retained(() => ({ callers: callersByIp(slim.value), serving: servingPodsByIp(slim.value) }));
console.log(`node ${process.version}, ${COUNT} pods`);
console.log(`full pod objects: ${full.mb.toFixed(1)} MB (${((full.mb * 1024 * 1024) / COUNT).toFixed(0)} B/pod)`);
console.log(
  `slim pod objects (kept by the informer): ${slim.mb.toFixed(1)} MB (${((slim.mb * 1024 * 1024) / COUNT).toFixed(0)} B/pod)`,
);
console.log(
  `caller + peer-pod indexes: ${indexes.mb.toFixed(1)} MB (${indexes.value.callers.size} callers, ${indexes.value.serving.size} serving pods)`,
);
// Rebuilt on every (debounced) change of the watched pods: what a churning cluster costs per rebuild.
const started = performance.now();
const rounds = 20;
for (let i = 0; i < rounds; i++) {
  const callers = callersByIp(slim.value);
  servingPodsByIp(slim.value);
  JSON.stringify([...callers]);
}
console.log(
  `rebuilding the indexes (and the change key) per pod change: ${((performance.now() - started) / rounds).toFixed(1)} ms`,
);
