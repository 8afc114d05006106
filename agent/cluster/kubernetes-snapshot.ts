// Kubernetes objects → the agent's ClusterSnapshot. Pure: the informers hand in what they hold,
// these functions decide what the router may use. Objects arrive both from lists (where the API
// server omits apiVersion/kind on built-in items) and from watch events, so nothing here depends
// on apiVersion/kind being present.
import { ENGINES } from '../types.ts';
import type { Engine, KvEventsEndpoint, Pod } from '../types.ts';
import type { Caller } from './types.ts';

export const POOL_LABEL = 'kinference.io/pool';
export const MODEL_ANNOTATION = 'kinference.io/model';
export const ENGINE_ANNOTATION = 'kinference.io/engine';
export const PORT_ANNOTATION = 'kinference.io/port';
/** The pod's KV-event ports, `<pub port>[,<replay port>]` (vLLM --kv-events-config), and topic. */
export const KV_EVENTS_ANNOTATION = 'kinference.io/kv-events';
export const KV_TOPIC_ANNOTATION = 'kinference.io/kv-events-topic';
/** LoRA adapters the pod's server serves (comma-separated), routed to as models of their own. */
export const ADAPTERS_ANNOTATION = 'kinference.io/adapters';
export const ANNOTATION_PREFIX = 'kinference.io/';
export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

/** The fields of the objects we read; everything else is ignored. */
export interface ObjectMeta {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  deletionTimestamp?: string | Date;
  managedFields?: unknown;
}

export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
}

export interface PodObject extends KubeObject {
  spec?: {
    nodeName?: string;
    hostNetwork?: boolean;
    containers?: {
      name?: string;
      command?: string[];
      args?: string[];
      ports?: { name?: string; containerPort?: number; protocol?: string }[];
    }[];
  };
  status?: {
    phase?: string;
    podIP?: string;
    podIPs?: { ip?: string }[];
    conditions?: { type?: string; status?: string }[];
  };
}

export interface EndpointSliceObject extends KubeObject {
  addressType?: string;
  endpoints?: {
    addresses?: string[];
    nodeName?: string;
    conditions?: { ready?: boolean; serving?: boolean; terminating?: boolean };
  }[];
  ports?: { name?: string; port?: number; protocol?: string }[];
}

export interface ConfigMapObject extends KubeObject {
  data?: Record<string, string>;
}

/** What a pod's InferencePool says about it (agent/cluster/inference-pools.ts). */
export interface PoolMembership {
  /** namespace/name of the pool. */
  pool: string;
  port: number;
  models: string[];
  engine?: string;
}

/** A pod → the InferencePool it belongs to, if any. */
export type PoolMembers = (pod: PodObject) => PoolMembership | undefined;

/** host:port, bracketing IPv6 literals. */
export function hostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

export function isModelServer(pod: PodObject, poolLabel = POOL_LABEL, members?: PoolMembers): boolean {
  const meta = pod.metadata ?? {};
  return (
    meta.labels?.[poolLabel] !== undefined ||
    meta.annotations?.[MODEL_ANNOTATION] !== undefined ||
    members?.(pod) !== undefined
  );
}

function isReady(pod: PodObject): boolean {
  return (pod.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

function servingPort(pod: PodObject, members?: PoolMembers): number | undefined {
  const annotated = pod.metadata?.annotations?.[PORT_ANNOTATION];
  if (annotated !== undefined) {
    const port = Number(annotated.trim());
    return Number.isInteger(port) && port > 0 && port < 65536 ? port : undefined;
  }
  for (const container of pod.spec?.containers ?? []) {
    for (const port of container.ports ?? []) {
      if (port.name === 'http' && port.containerPort !== undefined) return port.containerPort;
    }
  }
  return members?.(pod)?.port;
}

/** Why a model-server pod is not routable now, or undefined when it is. */
export function unroutableReason(pod: PodObject, members?: PoolMembers): string | undefined {
  if (pod.metadata?.deletionTimestamp) return 'terminating';
  if (pod.status?.phase !== 'Running') return `phase ${pod.status?.phase ?? 'unknown'}`;
  if (!isReady(pod)) return 'not ready';
  if (!pod.status?.podIP) return 'no pod IP';
  if (servingPort(pod, members) === undefined) {
    return `no port (annotation ${PORT_ANNOTATION} or a container port named http)`;
  }
  return undefined;
}

function splitList(value: string | undefined): string[] {
  if (value === undefined) return [];
  return [
    ...new Set(
      value
        .split(',')
        .map((s) => s.trim())
        .filter((s) => s !== ''),
    ),
  ];
}

/** Flags naming how many requests a model server runs at once (vLLM, TGI, SGLang). */
const CONCURRENCY_FLAGS = ['--max-num-seqs', '--max-concurrent-requests', '--max-running-requests'];

/** The server's own concurrency limit from its containers' command lines, when one is given. */
export function serverConcurrency(pod: PodObject): number | undefined {
  for (const container of pod.spec?.containers ?? []) {
    const argv = [...(container.command ?? []), ...(container.args ?? [])];
    for (let i = 0; i < argv.length; i++) {
      const [flag, inline] = argv[i].split('=', 2);
      if (!CONCURRENCY_FLAGS.includes(flag)) continue;
      const value = Number(inline ?? argv[i + 1]);
      if (Number.isInteger(value) && value > 0) return value;
    }
  }
  return undefined;
}

/**
 * The routable model-server pods on `node`: labelled `poolLabel` or annotated with their models.
 * A terminating or not-ready pod is left out rather than marked: the router has no use for an
 * address it must not send to.
 */
export function modelServerPods(
  pods: readonly PodObject[],
  node: string,
  poolLabel = POOL_LABEL,
  members?: PoolMembers,
): Pod[] {
  const out: Pod[] = [];
  for (const pod of pods) {
    if (
      pod.spec?.nodeName !== node ||
      !isModelServer(pod, poolLabel, members) ||
      unroutableReason(pod, members) !== undefined
    )
      continue;
    const meta = pod.metadata ?? {};
    const pool = members?.(pod);
    const engine = meta.annotations?.[ENGINE_ANNOTATION]?.trim() ?? pool?.engine;
    const name = meta.name ?? '';
    const namespace = meta.namespace ?? 'default';
    const result: Pod = {
      uid: meta.uid ?? `${namespace}/${name}`,
      name,
      namespace,
      node,
      address: hostPort(pod.status!.podIP!, servingPort(pod, members)!),
      models: splitList(
        [meta.annotations?.[MODEL_ANNOTATION], ...(pool?.models ?? []), meta.annotations?.[ADAPTERS_ANNOTATION]]
          .filter(Boolean)
          .join(','),
      ),
    };
    const adapters = splitList(meta.annotations?.[ADAPTERS_ANNOTATION]);
    if (adapters.length > 0) result.adapters = adapters;
    if (engine !== undefined && (ENGINES as readonly string[]).includes(engine)) result.engine = engine as Engine;
    const concurrency = serverConcurrency(pod);
    if (concurrency !== undefined) result.maxConcurrency = concurrency;
    const kvEvents = kvEventsOf(pod.status!.podIP!, meta.annotations);
    if (kvEvents) result.kvEvents = kvEvents;
    out.push(result);
  }
  return out.sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`));
}

/** `kinference.io/kv-events: "5557,5558"` → the pod IP's PUB and replay endpoints; a malformed value: none. */
function kvEventsOf(ip: string, annotations: Record<string, string> | undefined): KvEventsEndpoint | undefined {
  const value = annotations?.[KV_EVENTS_ANNOTATION]?.trim();
  if (!value) return undefined;
  const ports = value.split(',').map((p) => Number(p.trim()));
  if (ports.length > 2 || !ports.every((p) => Number.isInteger(p) && p > 0 && p < 65_536)) return undefined;
  const at = (port: number) => `tcp://${hostPort(ip, port)}`;
  const topic = annotations?.[KV_TOPIC_ANNOTATION];
  return {
    endpoint: at(ports[0]),
    ...(ports[1] !== undefined ? { replayEndpoint: at(ports[1]) } : {}),
    ...(topic !== undefined ? { topic } : {}),
  };
}

/**
 * Pod IP → caller for every pod in the cluster that owns its IP: a caller on another node reaches
 * this agent's pod IP too, and must be known by its namespace, not guessed. Host-network pods
 * share the node's address with every other host-network pod, so their IP names no single
 * namespace (they stay unidentified); finished pods' IPs may already belong to a new pod.
 */
export function callersByIp(pods: readonly PodObject[]): Map<string, Caller> {
  const entries: [string, Caller][] = [];
  for (const pod of pods) {
    if (pod.spec?.hostNetwork) continue;
    const phase = pod.status?.phase;
    if (phase === 'Succeeded' || phase === 'Failed') continue;
    const ips = new Set<string>();
    if (pod.status?.podIP) ips.add(pod.status.podIP);
    for (const { ip } of pod.status?.podIPs ?? []) if (ip) ips.add(ip);
    const caller = { namespace: pod.metadata?.namespace ?? 'default', pod: pod.metadata?.name ?? '' };
    for (const ip of ips) entries.push([ip, caller]);
  }
  entries.sort(([a], [b]) => a.localeCompare(b));
  return new Map(entries);
}

export interface ServingPod {
  namespace: string;
  name: string;
  node: string;
}

/**
 * Pod IP → the routable model-server pod (pool label or model annotation) that owns it, across
 * the cluster: what a gossiped pod must match to become a candidate.
 */
export function servingPodsByIp(
  pods: readonly PodObject[],
  poolLabel = POOL_LABEL,
  members?: PoolMembers,
): Map<string, ServingPod> {
  const out = new Map<string, ServingPod>();
  for (const pod of pods) {
    if (
      !isModelServer(pod, poolLabel, members) ||
      unroutableReason(pod, members) !== undefined ||
      pod.spec?.hostNetwork
    )
      continue;
    const serving = {
      namespace: pod.metadata?.namespace ?? 'default',
      name: pod.metadata?.name ?? '',
      node: pod.spec?.nodeName ?? '',
    };
    out.set(pod.status!.podIP!, serving);
    for (const { ip } of pod.status?.podIPs ?? []) if (ip) out.set(ip, serving);
  }
  return out;
}

/**
 * The fields of a pod this agent reads, nothing else. The pods informer covers the whole cluster
 * (callers and peers live on every node); a full pod object is several KB (managed fields, env,
 * volumes), a slim one a few hundred bytes. Annotations other than ours are dropped.
 */
export function slimPod(pod: PodObject): PodObject {
  const meta = pod.metadata ?? {};
  const annotations: Record<string, string> = {};
  for (const [k, v] of Object.entries(meta.annotations ?? {})) if (k.startsWith(ANNOTATION_PREFIX)) annotations[k] = v;
  const containers = pod.spec?.containers?.map((c) => ({
    ports: c.ports?.filter((p) => p.name === 'http').map((p) => ({ name: p.name, containerPort: p.containerPort })),
  }));
  return {
    metadata: {
      name: meta.name,
      namespace: meta.namespace,
      uid: meta.uid,
      resourceVersion: meta.resourceVersion,
      labels: meta.labels,
      annotations,
      deletionTimestamp: meta.deletionTimestamp,
    },
    spec: { nodeName: pod.spec?.nodeName, hostNetwork: pod.spec?.hostNetwork, containers },
    status: {
      phase: pod.status?.phase,
      podIP: pod.status?.podIP,
      podIPs: pod.status?.podIPs?.map(({ ip }) => ({ ip })),
      conditions: pod.status?.conditions
        ?.filter((c) => c.type === 'Ready')
        .map(({ type, status }) => ({ type, status })),
    },
  };
}

/**
 * Namespace → its kinference.io/* annotations. Other annotations are dropped: they are not ours
 * and can be large (kubectl's last-applied-configuration), and every agent holds every namespace.
 */
export function namespaceAnnotations(namespaces: readonly KubeObject[]): Map<string, Record<string, string>> {
  const entries: [string, Record<string, string>][] = [];
  for (const ns of namespaces) {
    const name = ns.metadata?.name;
    if (!name) continue;
    const ours: Record<string, string> = {};
    for (const [key, value] of Object.entries(ns.metadata?.annotations ?? {}).sort(([a], [b]) => a.localeCompare(b))) {
      if (key.startsWith(ANNOTATION_PREFIX)) ours[key] = value;
    }
    entries.push([name, ours]);
  }
  entries.sort(([a], [b]) => a.localeCompare(b));
  return new Map(entries);
}

/**
 * InferencePolicy objects as found, minus server bookkeeping, with apiVersion/kind filled in.
 * A policy in the agent's own namespace is cluster-wide (namespace `*`): a Kubernetes object
 * cannot live in `*`, and the platform team owns the agent's namespace anyway.
 */
export function policyObjects(policies: readonly KubeObject[], clusterWideNamespace?: string): unknown[] {
  return policies
    .map((policy) => {
      const { managedFields: _managed, ...metadata } = policy.metadata ?? {};
      if (clusterWideNamespace !== undefined && metadata.namespace === clusterWideNamespace) metadata.namespace = '*';
      return {
        ...policy,
        apiVersion: policy.apiVersion ?? 'kinference.io/v1alpha1',
        kind: policy.kind ?? 'InferencePolicy',
        metadata,
      };
    })
    .sort((a, b) =>
      `${a.metadata.namespace ?? ''}/${a.metadata.name ?? ''}`.localeCompare(
        `${b.metadata.namespace ?? ''}/${b.metadata.name ?? ''}`,
      ),
    );
}

export interface PeerOptions {
  /** This agent's node: its own endpoint is not a peer. */
  node: string;
  /** This agent's pod IP (downward API), excluded too. */
  podIP?: string;
  /** Overrides the port the EndpointSlices carry. */
  gossipPort?: number;
}

const DEFAULT_GOSSIP_PORT = 7946;

function slicePort(slice: EndpointSliceObject): number | undefined {
  const ports = slice.ports ?? [];
  return (ports.find((p) => p.name === 'gossip') ?? (ports.length === 1 ? ports[0] : undefined))?.port;
}

/**
 * Gossip addresses of the other agents. Not-ready agents are included on purpose (the gossip
 * Service publishes them): an agent becomes ready only after it has heard the cluster, and a
 * terminating one still owns its node's estimates while it drains. With `servingOnly`, only the
 * agents whose pod is ready (`serving`, which stays true to readiness when the Service publishes
 * not-ready addresses; `ready` on clusters without it): gossip's membership (see gossipMembers).
 */
export function peerAddresses(
  slices: readonly EndpointSliceObject[],
  opts: PeerOptions,
  servingOnly = false,
): string[] {
  const peers = new Set<string>();
  for (const slice of slices) {
    if (slice.addressType === 'FQDN') continue;
    const port = opts.gossipPort ?? slicePort(slice) ?? DEFAULT_GOSSIP_PORT;
    for (const endpoint of slice.endpoints ?? []) {
      if (endpoint.nodeName !== undefined && endpoint.nodeName === opts.node) continue;
      const conditions = endpoint.conditions ?? {};
      if (servingOnly && (conditions.serving ?? conditions.ready) === false) continue;
      for (const address of endpoint.addresses ?? []) {
        if (address === opts.podIP) continue;
        peers.add(hostPort(address, port));
      }
    }
  }
  return [...peers].sort();
}

/**
 * Gossip's membership: the agents whose pod is ready. A crashed or hung agent fails its
 * readiness probe, a deleted one leaves the slice; either way peers stop reading its estimates
 * as soon as the slice says so, instead of after the gossip TTL (agent/gossip/origins.ts).
 */
export const gossipMembers = (slices: readonly EndpointSliceObject[], opts: PeerOptions): string[] =>
  peerAddresses(slices, opts, true);
