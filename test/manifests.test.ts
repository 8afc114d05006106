// The deployment manifests: the kustomize base renders, every object is schema-valid
// (kubernetes-models), the examples are valid InferencePolicies / providers / namespaces, and the
// properties the design depends on hold (node-local Service, read-only RBAC, hardened DaemonSet,
// probes on the admin port, downward API, gossip peers published before ready, drain fits the
// grace period).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { parseAllDocuments, parse } from 'yaml';
import { CustomResourceDefinition } from 'kubernetes-models/apiextensions.k8s.io/v1/CustomResourceDefinition';
import { DaemonSet } from 'kubernetes-models/apps/v1/DaemonSet';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { ClusterRole } from 'kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRole';
import { ClusterRoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRoleBinding';
import { Role } from 'kubernetes-models/rbac.authorization.k8s.io/v1/Role';
import { RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1/NetworkPolicy';
import { Namespace } from 'kubernetes-models/v1/Namespace';
import { Secret } from 'kubernetes-models/v1/Secret';
import { Service } from 'kubernetes-models/v1/Service';
import { ServiceAccount } from 'kubernetes-models/v1/ServiceAccount';
import { parseProvidersConfigMap } from '../agent/cluster/kubernetes-providers.ts';
import { policyObjects, type KubeObject } from '../agent/cluster/kubernetes-snapshot.ts';
import { parseDuration } from '../shared/duration.ts';
import { settingsFromObject } from '../agent/config/load.ts';
import { checkNamespaceAnnotations } from '../agent/policy/annotations.ts';
import { checkPolicySet } from '../agent/policy/resolve.ts';
import { loadPolicies } from '../agent/policy/validate.ts';
import { IMAGE_ENV, IMAGE_NODE_FLAGS } from '../bench/process-memory.ts';

const ROOT = new URL('..', import.meta.url).pathname;
const MANIFESTS = join(ROOT, 'manifests');
const CRD_PATH = join(MANIFESTS, 'crd', 'inferencepolicies.kinference.io.yaml');
const EXAMPLES = join(MANIFESTS, 'examples');

// ---- objects ----------------------------------------------------------------------------------

interface Obj {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [key: string]: unknown;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the models' constructors take their own shapes
type Model = new (data: any) => { validate(): void };
const MODELS: Record<string, Model> = {
  'v1/Namespace': Namespace,
  'v1/ServiceAccount': ServiceAccount,
  'v1/ConfigMap': ConfigMap,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'apps/v1/DaemonSet': DaemonSet,
  'apps/v1/Deployment': Deployment,
  'rbac.authorization.k8s.io/v1/ClusterRole': ClusterRole,
  'rbac.authorization.k8s.io/v1/ClusterRoleBinding': ClusterRoleBinding,
  'rbac.authorization.k8s.io/v1/Role': Role,
  'rbac.authorization.k8s.io/v1/RoleBinding': RoleBinding,
  'apiextensions.k8s.io/v1/CustomResourceDefinition': CustomResourceDefinition,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy,
};

function validateModel(obj: Obj, where: string): void {
  const Kind = MODELS[`${obj.apiVersion}/${obj.kind}`];
  assert.ok(Kind, `${where}: ${obj.apiVersion}/${obj.kind} has no validator here (add it to MODELS)`);
  try {
    new Kind(obj).validate();
  } catch (err) {
    assert.fail(`${where}: ${obj.kind} ${obj.metadata?.name} is invalid: ${(err as Error).message}`);
  }
}

function parseDocs(text: string, where: string): Obj[] {
  return parseAllDocuments(text)
    .map((doc) => {
      assert.equal(doc.errors.length, 0, `${where}: ${doc.errors.map((e) => e.message).join('; ')}`);
      return doc.toJS() as Obj | null;
    })
    .filter((o): o is Obj => o !== null);
}

// ---- a structural-schema check (the subset CRD schemas use), strict about unknown fields like kubectl ----

interface OpenAPISchema {
  type?: string;
  properties?: Record<string, OpenAPISchema>;
  required?: string[];
  additionalProperties?: boolean | OpenAPISchema;
  items?: OpenAPISchema;
  enum?: unknown[];
  pattern?: string;
  minimum?: number;
  maximum?: number;
  minItems?: number;
  maxItems?: number;
  minLength?: number;
  maxLength?: number;
  nullable?: boolean;
  anyOf?: OpenAPISchema[];
  allOf?: OpenAPISchema[];
  oneOf?: OpenAPISchema[];
  'x-kubernetes-preserve-unknown-fields'?: boolean;
  'x-kubernetes-int-or-string'?: boolean;
}

function schemaErrors(schema: OpenAPISchema, value: unknown, path = ''): string[] {
  const at = path || '(root)';
  if (value === null) return schema.nullable ? [] : [`${at}: must not be null`];
  const errors: string[] = [];
  if (schema['x-kubernetes-int-or-string']) {
    if (!(typeof value === 'string' || Number.isInteger(value))) errors.push(`${at}: expected an integer or a string`);
  } else if (schema.type) {
    const ok =
      schema.type === 'object'
        ? typeof value === 'object' && !Array.isArray(value)
        : schema.type === 'array'
          ? Array.isArray(value)
          : schema.type === 'integer'
            ? Number.isInteger(value)
            : schema.type === 'number'
              ? typeof value === 'number'
              : typeof value === schema.type;
    if (!ok) return [`${at}: expected ${schema.type}, found ${JSON.stringify(value)}`];
  }
  if (schema.enum && !schema.enum.includes(value)) errors.push(`${at}: expected one of ${schema.enum.join(', ')}`);
  if (typeof value === 'string') {
    if (schema.pattern && !new RegExp(schema.pattern, 'u').test(value))
      errors.push(`${at}: "${value}" does not match ${schema.pattern}`);
    if (schema.minLength !== undefined && value.length < schema.minLength)
      errors.push(`${at}: shorter than ${schema.minLength}`);
    if (schema.maxLength !== undefined && value.length > schema.maxLength)
      errors.push(`${at}: longer than ${schema.maxLength}`);
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) errors.push(`${at}: below ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) errors.push(`${at}: above ${schema.maximum}`);
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems)
      errors.push(`${at}: fewer than ${schema.minItems} items`);
    if (schema.maxItems !== undefined && value.length > schema.maxItems)
      errors.push(`${at}: more than ${schema.maxItems} items`);
    if (schema.items) value.forEach((item, i) => errors.push(...schemaErrors(schema.items!, item, `${path}[${i}]`)));
  } else if (typeof value === 'object') {
    const record = value as Record<string, unknown>;
    for (const key of schema.required ?? [])
      if (record[key] === undefined) errors.push(`${path ? `${path}.` : ''}${key}: required`);
    for (const [key, child] of Object.entries(record)) {
      const childPath = path ? `${path}.${key}` : key;
      const known = schema.properties?.[key];
      if (known) errors.push(...schemaErrors(known, child, childPath));
      else if (typeof schema.additionalProperties === 'object')
        errors.push(...schemaErrors(schema.additionalProperties, child, childPath));
      else if (
        schema.properties &&
        !schema['x-kubernetes-preserve-unknown-fields'] &&
        schema.additionalProperties !== true
      ) {
        errors.push(`${childPath}: unknown field`);
      }
    }
  }
  for (const sub of schema.allOf ?? []) errors.push(...schemaErrors(sub, value, path));
  if (schema.anyOf && !schema.anyOf.some((s) => schemaErrors(s, value, path).length === 0))
    errors.push(`${at}: matches none of anyOf`);
  if (schema.oneOf && schema.oneOf.filter((s) => schemaErrors(s, value, path).length === 0).length !== 1)
    errors.push(`${at}: must match exactly one of oneOf`);
  return errors;
}

// ---- rendering ----------------------------------------------------------------------------------

function hasKubectl(): boolean {
  return spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' }).status === 0;
}

const KUBECTL = hasKubectl();
let rendered: Obj[] = [];

function find(kind: string, name: string): Obj {
  const obj = rendered.find((o) => o.kind === kind && o.metadata.name === name);
  assert.ok(obj, `rendered manifests have no ${kind} ${name}`);
  return obj;
}

// Narrow views of what the invariants read.
interface Container {
  name: string;
  args?: string[];
  command?: string[];
  env?: {
    name: string;
    value?: string;
    valueFrom?: { fieldRef?: { fieldPath: string }; secretKeyRef?: { name: string; key: string } };
  }[];
  ports?: { name?: string; containerPort: number; protocol?: string }[];
  readinessProbe?: { httpGet?: { path: string; port: string | number } };
  livenessProbe?: { httpGet?: { path: string; port: string | number } };
  lifecycle?: { preStop?: { sleep?: { seconds: number } } };
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  securityContext?: Record<string, unknown> & { capabilities?: { drop?: string[]; add?: string[] } };
  volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[];
}
interface PodSpec {
  serviceAccountName?: string;
  terminationGracePeriodSeconds?: number;
  securityContext?: Record<string, unknown>;
  tolerations?: { key?: string; operator?: string; effect?: string }[];
  containers: Container[];
  volumes?: { name: string; configMap?: { name: string }; secret?: { secretName: string; optional?: boolean } }[];
  hostNetwork?: boolean;
}

function daemonSet(): {
  spec: {
    updateStrategy?: {
      type?: string;
      rollingUpdate?: { maxUnavailable?: number | string; maxSurge?: number | string };
    };
    template: { spec: PodSpec };
  };
} {
  return find('DaemonSet', 'kinference-agent') as never;
}

function agentContainer(): Container {
  const container = daemonSet().spec.template.spec.containers.find((c) => c.name === 'agent');
  assert.ok(container, 'the DaemonSet has a container named agent');
  return container;
}

function portNumber(container: Container, port: string | number | undefined): number | undefined {
  return typeof port === 'number' ? port : container.ports?.find((p) => p.name === port)?.containerPort;
}

function agentConfig(): Record<string, unknown> {
  const cm = find('ConfigMap', 'kinference-agent') as Obj & { data: Record<string, string> };
  return parse(cm.data['agent.yaml']) as Record<string, unknown>;
}

describe(
  'manifests (kustomize base)',
  { skip: KUBECTL ? false : 'kubectl is not installed: cannot render manifests/ (kubectl kustomize)' },
  () => {
    before(() => {
      // The CRD is checked in (a policy test keeps it equal to its rendering from the schema).
      const result = spawnSync('kubectl', ['kustomize', MANIFESTS], { encoding: 'utf8' });
      assert.equal(result.status, 0, `kubectl kustomize failed: ${result.stderr}`);
      rendered = parseDocs(result.stdout, 'kubectl kustomize manifests/');
    });

    it('renders objects that are all schema-valid', () => {
      assert.ok(rendered.length >= 10);
      for (const obj of rendered) validateModel(obj, 'manifests/');
      const kinds = new Set(rendered.map((o) => o.kind));
      for (const kind of [
        'Namespace',
        'ServiceAccount',
        'ClusterRole',
        'ClusterRoleBinding',
        'Role',
        'RoleBinding',
        'ConfigMap',
        'DaemonSet',
        'Service',
      ]) {
        assert.ok(kinds.has(kind), `missing ${kind}`);
      }
      assert.ok(!kinds.has('Secret'), 'no Secret in the base: keys are created out of band, never checked in');
      for (const obj of rendered)
        if (obj.kind !== 'Namespace' && obj.kind !== 'CustomResourceDefinition' && !obj.kind.startsWith('Cluster')) {
          assert.equal(obj.metadata.namespace, 'kinference', `${obj.kind} ${obj.metadata.name} lives in kinference`);
        }
    });

    it('includes the InferencePolicy CRD', () => {
      const crd = find('CustomResourceDefinition', 'inferencepolicies.kinference.io') as Obj & {
        spec: {
          group: string;
          scope: string;
          names: { plural: string; kind: string };
          versions: { name: string; served: boolean; storage: boolean }[];
        };
      };
      assert.equal(crd.spec.group, 'kinference.io');
      assert.equal(crd.spec.scope, 'Namespaced');
      assert.deepEqual([crd.spec.names.plural, crd.spec.names.kind], ['inferencepolicies', 'InferencePolicy']);
      const v = crd.spec.versions.find((x) => x.name === 'v1alpha1');
      assert.ok(
        v?.served && v.storage,
        'v1alpha1 is served and stored (discovery watches /apis/kinference.io/v1alpha1)',
      );
    });

    it('exposes the agent through a node-local Service, port 80 → api', () => {
      const svc = find('Service', 'kinference') as Obj & {
        spec: {
          internalTrafficPolicy?: string;
          selector: Record<string, string>;
          ports: { port: number; targetPort: string | number; protocol?: string }[];
        };
      };
      assert.equal(svc.spec.internalTrafficPolicy, 'Local');
      assert.equal(svc.spec.ports.length, 1);
      assert.equal(svc.spec.ports[0].port, 80);
      assert.equal(portNumber(agentContainer(), svc.spec.ports[0].targetPort), 8080);
      const podLabels = (
        find('DaemonSet', 'kinference-agent') as Obj & {
          spec: { template: { metadata: { labels: Record<string, string> } } };
        }
      ).spec.template.metadata.labels;
      for (const [k, v] of Object.entries(svc.spec.selector))
        assert.equal(podLabels[k], v, `Service selector ${k} matches the agent pods`);
    });

    it('admits the API only from client namespaces, admin from monitoring, gossip from agents', () => {
      type Peer = {
        namespaceSelector?: { matchLabels?: Record<string, string> };
        podSelector?: { matchLabels?: Record<string, string> };
        ipBlock?: unknown;
      };
      const np = find('NetworkPolicy', 'kinference-agent') as Obj & {
        spec: {
          podSelector: { matchLabels: Record<string, string> };
          policyTypes: string[];
          ingress: { from: Peer[]; ports: { port: string | number; protocol: string }[] }[];
        };
      };
      const podLabels = (
        find('DaemonSet', 'kinference-agent') as Obj & {
          spec: { template: { metadata: { labels: Record<string, string> } } };
        }
      ).spec.template.metadata.labels;
      for (const [k, v] of Object.entries(np.spec.podSelector.matchLabels))
        assert.equal(podLabels[k], v, `selects the agent pods (${k})`);
      assert.deepEqual(np.spec.policyTypes, ['Ingress']);
      const rule = (port: string) => np.spec.ingress.filter((r) => r.ports.some((p) => p.port === port));
      for (const port of ['api', 'admin', 'gossip']) {
        assert.equal(rule(port).length, 1, `one rule for ${port}`);
        assert.ok(portNumber(agentContainer(), port), `${port} is a named container port`);
        assert.ok(
          rule(port)[0].from.length > 0 && rule(port)[0].from.every((p) => !p.ipBlock),
          `${port}: named sources, no address blocks`,
        );
      }
      assert.deepEqual(rule('api')[0].from, [
        { namespaceSelector: { matchLabels: { 'kinference.io/clients': 'enabled' } } },
      ]);
      assert.deepEqual(rule('admin')[0].from, [
        { namespaceSelector: { matchLabels: { 'kinference.io/monitoring': 'enabled' } } },
      ]);
      assert.deepEqual(rule('gossip')[0].from, [{ podSelector: { matchLabels: np.spec.podSelector.matchLabels } }]);
    });

    it('publishes every agent, ready or not, through the headless gossip Service (UDP 7946)', () => {
      const svc = find('Service', 'kinference-gossip') as Obj & {
        spec: {
          clusterIP?: string;
          publishNotReadyAddresses?: boolean;
          ports: { port: number; targetPort: string | number; protocol?: string }[];
        };
      };
      assert.equal(svc.spec.clusterIP, 'None');
      assert.equal(svc.spec.publishNotReadyAddresses, true);
      assert.deepEqual(
        svc.spec.ports.map((p) => [p.port, p.protocol]),
        [[7946, 'UDP']],
      );
      const port = agentContainer().ports?.find((p) => p.name === svc.spec.ports[0].targetPort);
      assert.deepEqual([port?.containerPort, port?.protocol], [7946, 'UDP']);
      const config = agentConfig() as { kubernetes?: { gossipService?: string }; listen: { gossip?: string } };
      assert.equal(config.kubernetes?.gossipService ?? 'kinference-gossip', 'kinference-gossip');
      assert.match(config.listen.gossip ?? '', /:7946$/);
    });

    it("grants read-only RBAC: get/list/watch only (and TokenReview create), nothing on Secrets, bound to the agent's ServiceAccount", () => {
      const rules = rendered
        .filter((o) => o.kind === 'ClusterRole' || o.kind === 'Role')
        .flatMap((o) =>
          (
            o as Obj & {
              rules: { apiGroups?: string[]; resources?: string[]; verbs: string[]; resourceNames?: string[] }[];
            }
          ).rules.map((r) => ({ ...r, role: `${o.kind}/${o.metadata.name}` })),
        );
      for (const rule of rules) {
        // A TokenReview writes nothing: it asks whose token a peer presented (gossip.tokenBinding).
        const review = rule.apiGroups?.join() === 'authentication.k8s.io' && rule.resources?.join() === 'tokenreviews';
        for (const verb of rule.verbs)
          assert.ok(
            ['get', 'list', 'watch'].includes(verb) || (review && verb === 'create'),
            `${rule.role}: verb ${verb} is not read-only`,
          );
        assert.ok(!rule.resources?.includes('*') && !rule.apiGroups?.includes('*'), `${rule.role}: no wildcards`);
        assert.ok(!rule.resources?.includes('secrets'), `${rule.role}: no access to Secrets (they are mounted)`);
      }
      const granted = (group: string, resource: string) =>
        rules.some(
          (r) =>
            r.apiGroups?.includes(group) &&
            r.resources?.includes(resource) &&
            ['list', 'watch'].every((v) => r.verbs.includes(v)),
        );
      for (const [group, resource] of [
        ['', 'pods'],
        ['', 'namespaces'],
        ['', 'configmaps'],
        ['discovery.k8s.io', 'endpointslices'],
        ['kinference.io', 'inferencepolicies'],
      ]) {
        assert.ok(granted(group, resource), `list+watch ${group || 'core'}/${resource}`);
      }
      const config = agentConfig() as { kubernetes?: { providersConfigMap?: string } };
      const cmRule = rules.find((r) => r.resources?.includes('configmaps'));
      if (cmRule?.resourceNames)
        assert.deepEqual(cmRule.resourceNames, [config.kubernetes?.providersConfigMap ?? 'kinference-providers']);
      const sa = daemonSet().spec.template.spec.serviceAccountName;
      assert.ok(sa);
      find('ServiceAccount', sa);
      for (const binding of rendered.filter((o) => o.kind === 'ClusterRoleBinding' || o.kind === 'RoleBinding')) {
        const b = binding as Obj & {
          subjects: { kind: string; name: string; namespace?: string }[];
          roleRef: { kind: string; name: string };
        };
        assert.deepEqual(b.subjects, [{ kind: 'ServiceAccount', name: sa, namespace: 'kinference' }]);
        find(b.roleRef.kind, b.roleRef.name);
      }
    });

    it('runs the agent hardened: non-root 65532, read-only root, no privilege escalation, no capabilities, RuntimeDefault seccomp', () => {
      const pod = daemonSet().spec.template.spec;
      const c = agentContainer();
      assert.equal(pod.securityContext?.runAsNonRoot, true);
      assert.equal(pod.securityContext?.runAsUser, 65532);
      assert.deepEqual(pod.securityContext?.seccompProfile, { type: 'RuntimeDefault' });
      assert.equal(c.securityContext?.allowPrivilegeEscalation, false);
      assert.equal(c.securityContext?.readOnlyRootFilesystem, true);
      assert.equal(c.securityContext?.runAsNonRoot, true);
      assert.equal(c.securityContext?.runAsUser, 65532);
      assert.deepEqual(c.securityContext?.capabilities?.drop, ['ALL']);
      assert.equal(c.securityContext?.capabilities?.add, undefined);
      assert.notEqual(c.securityContext?.privileged, true);
      assert.notEqual(pod.hostNetwork, true);
      for (const key of ['cpu', 'memory']) {
        assert.ok(c.resources?.requests?.[key], `requests.${key}`);
        assert.ok(c.resources?.limits?.[key], `limits.${key}`);
      }
      const ns = find('Namespace', 'kinference');
      assert.equal(ns.metadata.labels?.['pod-security.kubernetes.io/enforce'], 'restricted');
    });

    it('probes /readyz and /healthz on the admin port, and serves api 8080, admin 9090, gossip 7946/UDP', () => {
      const c = agentContainer();
      assert.deepEqual(
        c.ports?.map((p) => [p.name, p.containerPort, p.protocol ?? 'TCP']),
        [
          ['api', 8080, 'TCP'],
          ['admin', 9090, 'TCP'],
          ['gossip', 7946, 'UDP'],
        ],
      );
      assert.equal(c.readinessProbe?.httpGet?.path, '/readyz');
      assert.equal(c.livenessProbe?.httpGet?.path, '/healthz');
      assert.equal(portNumber(c, c.readinessProbe?.httpGet?.port), 9090);
      assert.equal(portNumber(c, c.livenessProbe?.httpGet?.port), 9090);
      const config = agentConfig() as { listen: { api: string; admin: string } };
      assert.match(config.listen.api, /:8080$/);
      assert.match(config.listen.admin, /:9090$/);
    });

    it('hands the agent its node and pod IP through the downward API, and the gossip key from a Secret', () => {
      const env = new Map((agentContainer().env ?? []).map((e) => [e.name, e]));
      assert.equal(env.get('KINFERENCE_NODE')?.valueFrom?.fieldRef?.fieldPath, 'spec.nodeName');
      assert.equal(env.get('KINFERENCE_POD_IP')?.valueFrom?.fieldRef?.fieldPath, 'status.podIP');
      assert.deepEqual(env.get('KINFERENCE_GOSSIP_KEY')?.valueFrom?.secretKeyRef, {
        name: 'kinference-gossip-key',
        key: 'key',
      });
      const config = agentConfig() as { gossip?: { key?: unknown } };
      assert.deepEqual(config.gossip?.key, { env: 'KINFERENCE_GOSSIP_KEY' });
    });

    it('runs `kinference agent --config` on a kubernetes-discovery config from the ConfigMap', () => {
      const c = agentContainer();
      assert.deepEqual([...(c.command ?? []), ...(c.args ?? [])], ['agent', '--config', '/etc/kinference/agent.yaml']);
      const mount = c.volumeMounts?.find((m) => m.mountPath === '/etc/kinference');
      assert.ok(mount?.readOnly);
      const volume = daemonSet().spec.template.spec.volumes?.find((v) => v.name === mount.name);
      assert.equal(volume?.configMap?.name, 'kinference-agent');
      const raw = agentConfig();
      assert.equal(raw.discovery, 'kubernetes');
      // What the env gives the agent at run time (downward API), then the agent's own validation.
      const settings = settingsFromObject(
        { ...raw, node: 'node-a', kubernetes: { ...(raw.kubernetes as object), podIP: '10.0.0.10' } },
        'manifests agent.yaml',
      );
      assert.equal(settings.discovery, 'kubernetes');
    });

    it("keeps the image's entrypoint and env: the compiled agent, with the node flags and malloc settings its memory was measured with", () => {
      assert.equal(agentContainer().command, undefined);
      const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
      const entrypoint = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(dockerfile)![1]) as string[];
      // npm run soak and npm run bench:memory run the agent with IMAGE_NODE_FLAGS.
      assert.deepEqual(entrypoint, ['/nodejs/bin/node', ...IMAGE_NODE_FLAGS, '/app/dist/agent/cli/main.js']);
      assert.match(dockerfile, /^RUN npm run build$/m);
      const env = Object.fromEntries(
        [...dockerfile.matchAll(/^ENV (.*)$/gm)].flatMap((m) => m[1].split(' ').map((kv) => kv.split('='))),
      );
      for (const [name, value] of Object.entries(IMAGE_ENV)) assert.equal(env[name], value, name);
      assert.match(dockerfile, /^COPY --from=compile \/app\/dist \.\/dist$/m);
      // A flag this Node no longer knows would stop the agent at start.
      const run = spawnSync(process.execPath, [...IMAGE_NODE_FLAGS, '-e', '0'], { encoding: 'utf8' });
      assert.equal(run.status, 0, run.stderr);
    });

    it('gives the agent a grace period that covers the preStop pause and the drain', () => {
      const pod = daemonSet().spec.template.spec;
      const drainMs = parseDuration(
        (agentConfig().limits as { drainTimeout?: string } | undefined)?.drainTimeout ?? '25s',
      );
      const preStopMs = (agentContainer().lifecycle?.preStop?.sleep?.seconds ?? 0) * 1000;
      assert.ok(drainMs >= 30_000, 'a drain of at least 30 s lets streams finish');
      assert.ok(
        (pod.terminationGracePeriodSeconds ?? 30) * 1000 >= preStopMs + drainMs + 5_000,
        `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} must cover preStop ${preStopMs} ms + drain ${drainMs} ms + margin`,
      );
    });

    it('rolls out with a surge: a node never goes without a ready agent', () => {
      const strategy = daemonSet().spec.updateStrategy;
      assert.equal(strategy?.type, 'RollingUpdate');
      assert.equal(strategy?.rollingUpdate?.maxUnavailable, 0);
      assert.equal(strategy?.rollingUpdate?.maxSurge, 1);
    });

    it('tolerates GPU taints and every other taint, so every node with callers has an agent', () => {
      const tolerations = daemonSet().spec.template.spec.tolerations ?? [];
      assert.ok(
        tolerations.some((t) => t.key === 'nvidia.com/gpu' && t.operator === 'Exists' && t.effect === 'NoSchedule'),
      );
      assert.ok(tolerations.some((t) => t.key === undefined && t.operator === 'Exists' && t.effect === undefined));
    });

    it('mounts provider credentials from an optional Secret where providers.yaml points', () => {
      const c = agentContainer();
      const mount = c.volumeMounts?.find((m) => m.mountPath === '/var/run/secrets/kinference/kinference-providers');
      assert.ok(mount?.readOnly);
      const volume = daemonSet().spec.template.spec.volumes?.find((v) => v.name === mount.name);
      assert.deepEqual([volume?.secret?.secretName, volume?.secret?.optional], ['kinference-providers', true]);
    });
  },
);

describe('manifests/examples', () => {
  const files = readdirSync(EXAMPLES)
    .filter((f) => f.endsWith('.yaml'))
    .sort();
  const docs = files.flatMap((file) =>
    parseDocs(readFileSync(join(EXAMPLES, file), 'utf8'), `examples/${file}`).map((obj) => ({ file, obj })),
  );

  it('are schema-valid Kubernetes objects', () => {
    assert.ok(docs.length > 0);
    for (const { file, obj } of docs) if (obj.kind !== 'InferencePolicy') validateModel(obj, `examples/${file}`);
  });

  it("InferencePolicies pass the CRD schema and the agent's own checks, and form an unambiguous set", () => {
    const policies = docs.filter((d) => d.obj.kind === 'InferencePolicy').map((d) => d.obj);
    assert.ok(policies.length >= 2);
    const crd = parseDocs(readFileSync(CRD_PATH, 'utf8'), 'CRD')[0] as Obj & {
      spec: { versions: { name: string; schema: { openAPIV3Schema: OpenAPISchema } }[] };
    };
    const schema = crd.spec.versions.find((v) => v.name === 'v1alpha1')!.schema.openAPIV3Schema;
    for (const p of policies) {
      assert.equal(p.apiVersion, 'kinference.io/v1alpha1');
      assert.deepEqual(
        schemaErrors(schema, p),
        [],
        `${p.metadata.namespace}/${p.metadata.name} against the CRD schema`,
      );
    }
    // The checker itself must catch what the API server would refuse.
    assert.notDeepEqual(schemaErrors(schema, { ...policies[0], spec: { slo: { ttft: 'fast' } } }), []);
    assert.notDeepEqual(schemaErrors(schema, { ...policies[0], spec: { overflow: { provider: ['x'] } } }), []);
    // As the agent reads them in Kubernetes: the agent namespace's policies are cluster-wide.
    const loaded = loadPolicies(policyObjects(policies as KubeObject[], 'kinference'));
    assert.deepEqual(loaded.errors, []);
    assert.deepEqual(checkPolicySet(loaded.policies), []);
    const namespaces = new Map(
      docs
        .filter((d) => d.obj.kind === 'Namespace')
        .map((d) => [d.obj.metadata.name, d.obj.metadata.annotations ?? {}]),
    );
    assert.ok(namespaces.size > 0);
    assert.deepEqual(checkNamespaceAnnotations(loaded.policies, namespaces), []);
  });

  it('the providers ConfigMap parses, names every provider the policies use, and holds no credentials', () => {
    const cm = docs.find((d) => d.obj.kind === 'ConfigMap' && d.obj.metadata.name === 'kinference-providers')?.obj as
      (Obj & { data: Record<string, string> }) | undefined;
    assert.ok(cm);
    assert.equal(cm.metadata.namespace, 'kinference');
    const providers = parseProvidersConfigMap(cm.data, 'examples/providers.yaml');
    const names = new Set(providers.map((p) => p.name));
    for (const { obj } of docs.filter((d) => d.obj.kind === 'InferencePolicy')) {
      for (const name of (obj as Obj & { spec: { overflow?: { providers?: string[] } } }).spec.overflow?.providers ??
        []) {
        assert.ok(names.has(name), `${obj.metadata.name} uses provider ${name}`);
      }
    }
    for (const p of providers) {
      for (const ref of [p.apiKey, p.credentials?.accessKeyId, p.credentials?.secretAccessKey]) {
        if (ref && 'file' in ref)
          assert.match(ref.file, /^\/var\/run\/secrets\/kinference\/kinference-providers\/[\w.-]+$/);
      }
    }
  });

  it('the gossip key Secret is a template without a key', () => {
    const secrets = docs.filter((d) => d.obj.kind === 'Secret');
    for (const { file, obj } of secrets) {
      assert.match(file, /template/);
      const values = {
        ...(obj.stringData as Record<string, string> | undefined),
        ...(obj.data as Record<string, string> | undefined),
      };
      for (const [key, value] of Object.entries(values)) assert.equal(value, '', `${file}: ${key} must stay empty`);
    }
  });
});
