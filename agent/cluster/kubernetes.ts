// Kubernetes discovery: five informers (client-node ListWatch) feed one ClusterSnapshot.
//
//   pods          /api/v1/pods (cluster-wide, slimmed)                 model servers on this node,
//                                                                      callers and peer pods anywhere
//   namespaces    /api/v1/namespaces                                  kinference.io/* annotations
//   policies      /apis/kinference.io/v1alpha1/inferencepolicies       all namespaces, raw
//   providers     ConfigMap <agentNamespace>/<providersConfigMap>     key providers.yaml
//   peers         EndpointSlices of the headless gossip Service        other agents' ip:gossipPort
//   pools         inference.networking.k8s.io/v1 InferencePools       (opt-in) pods they select
//
// Failure model. ListWatch resumes a closed watch from its resourceVersion and relists on 410;
// any other error stops it, and we restart it with capped, jittered exponential backoff (keeping
// its cache and resourceVersion, so a short outage costs a resumed watch, not a relist). While a
// source is down its last view stays in the snapshot and status() says connected: false. Watches
// ask for bookmarks and a server-side timeout; a watch silent for longer than idleTimeoutMs is
// presumed stalled (half-open connection) and resumed from its resourceVersion, which replays
// whatever it missed. No periodic relist: a resumed watch is complete, or it gets 410 and relists.
//
// Changes reach listeners at most debounceMs after the event arrives (the window is not extended
// by further events, so a churning pod cannot starve it), and only when the snapshot changed.
import { existsSync, readFileSync } from 'node:fs';
import { KubeConfig, ListWatch } from '@kubernetes/client-node';
import type { KubernetesObject } from '@kubernetes/client-node';
import type { ProviderSettings } from '../providers/types.ts';
import { describeError } from '../../shared/describe-error.ts';
import { listObjects, ResumingWatch } from './kubernetes-client.ts';
import type { Selectors } from './kubernetes-client.ts';
import { parseProvidersConfigMap } from './kubernetes-providers.ts';
import { INFERENCE_POOLS_PATH, poolMembers, type InferencePoolObject } from './inference-pools.ts';
import {
  callersByIp,
  modelServerPods,
  servingPodsByIp,
  slimPod,
  namespaceAnnotations,
  peerAddresses,
  gossipMembers,
  policyObjects,
  POOL_LABEL,
  SERVICE_NAME_LABEL,
} from './kubernetes-snapshot.ts';
import type { ConfigMapObject, EndpointSliceObject, PodObject } from './kubernetes-snapshot.ts';
import type { ClusterSnapshot, Discovery, DiscoveryStatus } from './types.ts';
import type { ClockAndRandom } from '../types.ts';

export interface KubernetesDiscoveryOptions extends ClockAndRandom {
  /** This agent's node (downward API `spec.nodeName`). */
  nodeName: string;
  /** A KubeConfig or a kubeconfig file path; default: in-cluster when running in a pod, else $KUBECONFIG / ~/.kube/config. */
  kubeconfig?: KubeConfig | string;
  /** Where the agent DaemonSet, its gossip Service and the providers ConfigMap live; default: the
   *  pod's own namespace when the in-cluster config is used, else `kinference`. */
  agentNamespace?: string;
  /** Headless Service selecting the agents; its EndpointSlices are the gossip peers. */
  gossipService?: string;
  /** Peers' gossip port; default: the slice's port named `gossip`, else 7946. */
  gossipPort?: number;
  /** This agent's pod IP (downward API `status.podIP`): never its own peer. */
  podIP?: string;
  providersConfigMap?: string;
  /** Label that marks a model-server pod (the annotation kinference.io/model does too). */
  podLabel?: string;
  /** Also take model-server pods from GIE InferencePools (their selector, target port, kinference.io/model). */
  inferencePools?: boolean;
  debounceMs?: number;
  /** start() resolves once every source listed, or after this long (status().synced tells which). */
  syncTimeoutMs?: number;
  /** Restart delay after an informer stopped on an error. */
  backoff?: { initialMs?: number; maxMs?: number };
  watch?: {
    /** Silence after which a watch is presumed stalled and resumed. */
    idleTimeoutMs?: number;
    connectTimeoutMs?: number;
    /** Server-side timeout per watch; each request adds up to 50 % jitter. */
    timeoutSeconds?: number;
  };
  list?: { pageSize?: number; timeoutMs?: number };
  log?: (level: 'info' | 'warn', message: string) => void;
}

export type SourceName = 'pods' | 'namespaces' | 'policies' | 'providers' | 'peers' | 'pools';

export interface SourceStatus {
  synced: boolean;
  connected: boolean;
  lastError?: string;
  /** now() when lastError happened. */
  lastErrorAt?: number;
}

export interface KubernetesDiscoveryStatus extends DiscoveryStatus {
  sources: Record<Exclude<SourceName, 'pools'>, SourceStatus> & { pools?: SourceStatus };
  /** Content problems that do not disconnect anything (e.g. an invalid providers.yaml, last good list kept). */
  problems: string[];
}

export interface KubernetesDiscovery extends Discovery {
  status(): KubernetesDiscoveryStatus;
}

export const DEFAULTS = {
  agentNamespace: 'kinference',
  gossipService: 'kinference-gossip',
  providersConfigMap: 'kinference-providers',
  debounceMs: 100,
  syncTimeoutMs: 10_000,
  backoffInitialMs: 500,
  backoffMaxMs: 30_000,
  // Above the API server's usual bookmark cadence (about a minute), so a healthy quiet watch is
  // never mistaken for a stalled one; a stalled one is resumed within this.
  idleTimeoutMs: 90_000,
  connectTimeoutMs: 15_000,
  watchTimeoutSeconds: 300,
  pageSize: 500,
  listTimeoutMs: 30_000,
  // A watch that stayed up this long ended normally (server timeout, API server restart): resume
  // at once instead of waiting out ListWatch's reconnect backoff, which only guards against a
  // server that closes watches as soon as it opens them.
  healthyWatchMs: 1_000,
} as const;

const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

function inCluster(): boolean {
  return Boolean(process.env.KUBERNETES_SERVICE_HOST) && existsSync(`${SERVICE_ACCOUNT_DIR}/token`);
}

/** In a pod: the service account; elsewhere: $KUBECONFIG or ~/.kube/config. */
export function defaultKubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  if (inCluster()) kc.loadFromCluster();
  else kc.loadFromDefault();
  return kc;
}

/** The namespace of the pod we run in (in-cluster config only), else the default. */
function defaultAgentNamespace(usingInClusterConfig: boolean): string {
  if (usingInClusterConfig && inCluster()) {
    try {
      const ns = readFileSync(`${SERVICE_ACCOUNT_DIR}/namespace`, 'utf8').trim();
      if (ns) return ns;
    } catch {
      // fall through to the default
    }
  }
  return DEFAULTS.agentNamespace;
}

function emptySnapshot(): ClusterSnapshot {
  return { pods: [], namespaces: new Map(), policies: [], providers: [], peers: [], callers: new Map() };
}

interface Source {
  name: SourceName;
  path: string;
  selectors: Selectors;
  informer: ListWatch<KubernetesObject>;
  transport: ResumingWatch;
  synced: boolean;
  connected: boolean;
  lastError?: string;
  lastErrorAt?: number;
  attempt: number;
  restart?: NodeJS.Timeout;
}

export function createKubernetesDiscovery(opts: KubernetesDiscoveryOptions): KubernetesDiscovery {
  const node = opts.nodeName;
  if (!node) throw new Error('kubernetes discovery needs the node name (downward API spec.nodeName)');
  const kc = opts.kubeconfig instanceof KubeConfig ? opts.kubeconfig : loadKubeConfig(opts.kubeconfig);
  const agentNamespace = opts.agentNamespace ?? defaultAgentNamespace(opts.kubeconfig === undefined);
  const gossipService = opts.gossipService ?? DEFAULTS.gossipService;
  const providersConfigMap = opts.providersConfigMap ?? DEFAULTS.providersConfigMap;
  const podLabel = opts.podLabel ?? POOL_LABEL;
  const debounceMs = opts.debounceMs ?? DEFAULTS.debounceMs;
  const now = opts.now ?? Date.now;
  const rand = opts.rand ?? Math.random;
  const log = opts.log ?? (() => undefined);
  const backoffInitialMs = opts.backoff?.initialMs ?? DEFAULTS.backoffInitialMs;
  const backoffMaxMs = opts.backoff?.maxMs ?? DEFAULTS.backoffMaxMs;
  const watchTimeoutSeconds = opts.watch?.timeoutSeconds ?? DEFAULTS.watchTimeoutSeconds;
  const listOptions = {
    pageSize: opts.list?.pageSize ?? DEFAULTS.pageSize,
    timeoutMs: opts.list?.timeoutMs ?? DEFAULTS.listTimeoutMs,
  };

  const listeners: (() => void)[] = [];
  let current = emptySnapshot();
  let currentKey = '';
  let debounce: NodeJS.Timeout | undefined;
  let started = false;
  let stopped = false;
  let published = false;
  let onSynced: (() => void) | undefined;

  let providers: ProviderSettings[] = [];
  let providersVersion: string | undefined;
  let providersProblem: string | undefined;

  function source(
    name: SourceName,
    path: string,
    selectors: Selectors,
    slim?: (item: KubernetesObject) => KubernetesObject,
  ): Source {
    const transport: ResumingWatch = new ResumingWatch(kc, {
      idleTimeoutMs: opts.watch?.idleTimeoutMs ?? DEFAULTS.idleTimeoutMs,
      connectTimeoutMs: opts.watch?.connectTimeoutMs ?? DEFAULTS.connectTimeoutMs,
      timeoutSeconds: () => watchTimeoutSeconds * (1 + rand() / 2),
      onEstablished: () => connected(src),
      onInternalError: (err) => failed(src, err),
      slim,
    });
    const informer = new ListWatch<KubernetesObject>(
      path,
      transport,
      async () => {
        let list;
        try {
          list = await listObjects<KubernetesObject>(kc, path, selectors, {
            ...listOptions,
            notOlderThan: transport.lastResourceVersion,
            slim,
          });
        } catch (err) {
          // A version the server cannot serve (etcd restored, "Too large resource version") must not
          // wedge the source: the retry asks for whatever the cache has.
          transport.lastResourceVersion = undefined;
          throw err;
        }
        transport.lastResourceVersion = list.metadata?.resourceVersion ?? transport.lastResourceVersion;
        // ListWatch applies the items right after this resolves; look at them after that.
        setImmediate(() => listed(src));
        return list;
      },
      false,
      selectors.labelSelector,
      selectors.fieldSelector,
      {
        delayFn: (ms) =>
          transport.lastWatchLastedMs >= DEFAULTS.healthyWatchMs ? Promise.resolve() : transport.pause(ms),
      },
    );
    const src: Source = { name, path, selectors, informer, transport, synced: false, connected: false, attempt: 0 };
    informer.on('change', changed);
    informer.on('error', (err?: unknown) => failed(src, err));
    return src;
  }

  const sources: Source[] = [
    // Cluster-wide: a caller or a gossiped pod on any node must be known by its IP (identity and
    // peer validation fail closed otherwise). Slimmed before caching; see slimPod.
    source('pods', '/api/v1/pods', {}, slimPod as (item: KubernetesObject) => KubernetesObject),
    source('namespaces', '/api/v1/namespaces', {}),
    source('policies', '/apis/kinference.io/v1alpha1/inferencepolicies', {}),
    source('providers', `/api/v1/namespaces/${agentNamespace}/configmaps`, {
      fieldSelector: `metadata.name=${providersConfigMap}`,
    }),
    source('peers', `/apis/discovery.k8s.io/v1/namespaces/${agentNamespace}/endpointslices`, {
      labelSelector: `${SERVICE_NAME_LABEL}=${gossipService}`,
    }),
    ...(opts.inferencePools ? [source('pools', INFERENCE_POOLS_PATH, {})] : []),
  ];
  const byName = Object.fromEntries(sources.map((s) => [s.name, s])) as Record<Exclude<SourceName, 'pools'>, Source> & {
    pools?: Source;
  };

  function connected(src: Source): void {
    if (stopped) return;
    if (!src.connected && src.lastError !== undefined) log('info', `kubernetes ${src.name}: connected again`);
    src.connected = true;
    src.attempt = 0;
  }

  function listed(src: Source): void {
    if (stopped) return;
    connected(src);
    if (!src.synced) {
      src.synced = true;
      if (sources.every((s) => s.synced)) {
        recompute();
        onSynced?.();
      }
    }
    changed();
  }

  function failed(src: Source, err: unknown): void {
    if (stopped) return;
    const message = describeError(err);
    if (src.connected || src.lastError !== message)
      log('warn', `kubernetes ${src.name}: ${message}; keeping the last view`);
    src.connected = false;
    src.lastError =
      src.name === 'policies' && / 404\b/.test(message)
        ? `${message} (is the InferencePolicy CRD installed?)`
        : message;
    src.lastErrorAt = now();
    if (src.restart) return;
    const delay = Math.min(backoffMaxMs, backoffInitialMs * 2 ** src.attempt) * (0.5 + rand() / 2);
    src.attempt++;
    src.restart = setTimeout(() => {
      src.restart = undefined;
      if (!stopped) run(src);
    }, delay);
  }

  function run(src: Source): void {
    src.informer.start().catch((err: unknown) => failed(src, err));
  }

  function changed(): void {
    if (stopped || debounce) return;
    debounce = setTimeout(() => {
      debounce = undefined;
      recompute();
    }, debounceMs);
  }

  function currentProviders(): ProviderSettings[] {
    const cm = byName.providers.informer.list().find((o) => o.metadata?.name === providersConfigMap) as
      ConfigMapObject | undefined;
    const version = cm ? (cm.metadata?.resourceVersion ?? JSON.stringify(cm.data)) : 'absent';
    if (version === providersVersion) return providers;
    providersVersion = version;
    try {
      providers = cm ? parseProvidersConfigMap(cm.data, `configmap ${agentNamespace}/${providersConfigMap}`) : [];
      providersProblem = undefined;
    } catch (err) {
      providersProblem = `${(err as Error).message} (keeping the last good provider list)`;
      log('warn', providersProblem);
    }
    return providers;
  }

  function recompute(): void {
    if (stopped || !sources.every((s) => s.synced)) return;
    const pods = byName.pods.informer.list() as PodObject[];
    const agentSlices = byName.peers.informer.list() as EndpointSliceObject[];
    const peerOptions = { node, podIP: opts.podIP, gossipPort: opts.gossipPort };
    const members = byName.pools ? poolMembers(byName.pools.informer.list() as InferencePoolObject[]) : undefined;
    const next: ClusterSnapshot = {
      pods: modelServerPods(pods, node, podLabel, members),
      namespaces: namespaceAnnotations(byName.namespaces.informer.list()),
      policies: policyObjects(byName.policies.informer.list(), agentNamespace),
      providers: currentProviders(),
      peers: peerAddresses(agentSlices, peerOptions),
      gossipMembers: gossipMembers(agentSlices, peerOptions),
      callers: callersByIp(pods),
      peerPods: { kind: 'cluster', pods: servingPodsByIp(pods, podLabel, members) },
    };
    const key = JSON.stringify([
      next.pods,
      [...next.namespaces],
      next.policies,
      next.providers,
      next.peers,
      next.gossipMembers,
      [...next.callers],
      [...(next.peerPods!.kind === 'cluster' ? next.peerPods!.pods : [])],
    ]);
    if (published && key === currentKey) return;
    published = true;
    current = next;
    currentKey = key;
    for (const listener of listeners) {
      try {
        listener();
      } catch (err) {
        log('warn', `discovery listener failed: ${describeError(err)}`);
      }
    }
  }

  return {
    async start() {
      if (started) return;
      started = true;
      const synced = new Promise<void>((resolve) => {
        onSynced = resolve;
      });
      for (const src of sources) run(src);
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, opts.syncTimeoutMs ?? DEFAULTS.syncTimeoutMs);
      });
      await Promise.race([synced, timeout]);
      clearTimeout(timer);
    },

    snapshot() {
      return current;
    },

    onChange(listener) {
      listeners.push(listener);
    },

    status() {
      const sourceStatus = {} as Record<SourceName, SourceStatus>;
      for (const s of sources) {
        sourceStatus[s.name] = { synced: s.synced, connected: s.connected };
        if (s.lastError !== undefined) sourceStatus[s.name].lastError = s.lastError;
        if (s.lastErrorAt !== undefined) sourceStatus[s.name].lastErrorAt = s.lastErrorAt;
      }
      const down = sources
        .filter((s) => !s.connected && s.lastError !== undefined)
        .sort((a, b) => (b.lastErrorAt ?? 0) - (a.lastErrorAt ?? 0));
      const status: KubernetesDiscoveryStatus = {
        synced: sources.every((s) => s.synced),
        connected: sources.every((s) => s.connected),
        sources: sourceStatus,
        problems: providersProblem ? [providersProblem] : [],
      };
      if (down.length > 0) status.lastError = `${down[0].name}: ${down[0].lastError}`;
      return status;
    },

    async stop() {
      stopped = true;
      clearTimeout(debounce);
      debounce = undefined;
      for (const src of sources) {
        clearTimeout(src.restart);
        src.restart = undefined;
        src.transport.close();
      }
      await Promise.all(sources.map((s) => s.informer.stop()));
      onSynced?.();
    },
  };
}

function loadKubeConfig(path: string | undefined): KubeConfig {
  if (path === undefined) return defaultKubeConfig();
  const kc = new KubeConfig();
  kc.loadFromFile(path);
  return kc;
}
