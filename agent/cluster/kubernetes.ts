// Kubernetes discovery: five informers (six with InferencePools; client-node ListWatch) feed one ClusterSnapshot.
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
import { KubeConfig, ListWatch } from '@kubernetes/client-node';
import type { KubernetesObject } from '@kubernetes/client-node';
import type { ProviderSettings } from '../providers/types.ts';
import { describeError } from '../../shared/describe-error.ts';
import { DEFAULTS, loadKubeConfig, resolveSettings, type KubernetesDiscoveryOptions } from './kubernetes-settings.ts';
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
  SERVICE_NAME_LABEL,
} from './kubernetes-snapshot.ts';
import type { ConfigMapObject, EndpointSliceObject, PodObject } from './kubernetes-snapshot.ts';
import type { ClusterSnapshot, Discovery, DiscoveryStatus } from './types.ts';

// Re-exported: callers build the discovery and its options from this file.
export type { KubernetesDiscoveryOptions } from './kubernetes-settings.ts';

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

/** The sources by name; the InferencePool one only when asked for. */
type SourcesByName = Record<Exclude<SourceName, 'pools'>, Source> & { pools?: Source };

export function createKubernetesDiscovery(opts: KubernetesDiscoveryOptions): KubernetesDiscovery {
  if (!opts.nodeName) throw new Error('kubernetes discovery needs the node name (downward API spec.nodeName)');
  return new InformerDiscovery(opts);
}

/** The informers, their health, and the snapshot they feed. */
class InformerDiscovery implements KubernetesDiscovery {
  readonly #opts: KubernetesDiscoveryOptions;
  readonly #settings: ReturnType<typeof resolveSettings>;
  readonly #kc: KubeConfig;
  readonly #now: () => number;
  readonly #rand: () => number;
  readonly #log: (level: 'info' | 'warn', message: string) => void;
  readonly #sources: Source[];
  readonly #byName: SourcesByName;
  readonly #listeners: (() => void)[] = [];
  #current = emptySnapshot();
  #currentKey = '';
  #debounce: NodeJS.Timeout | undefined;
  #started = false;
  #stopped = false;
  #published = false;
  #onSynced: (() => void) | undefined;
  #providers: ProviderSettings[] = [];
  #providersVersion: string | undefined;
  #providersProblem: string | undefined;

  constructor(opts: KubernetesDiscoveryOptions) {
    this.#opts = opts;
    this.#settings = resolveSettings(opts);
    this.#kc = opts.kubeconfig instanceof KubeConfig ? opts.kubeconfig : loadKubeConfig(opts.kubeconfig);
    this.#now = opts.now ?? Date.now;
    this.#rand = opts.rand ?? Math.random;
    this.#log = opts.log ?? (() => undefined);
    const { agentNamespace, providersConfigMap, gossipService } = this.#settings;
    this.#sources = [
      // Cluster-wide: a caller or a gossiped pod on any node must be known by its IP (identity and
      // peer validation fail closed otherwise). Slimmed before caching; see slimPod.
      this.#source('pods', '/api/v1/pods', {}, slimPod as (item: KubernetesObject) => KubernetesObject),
      this.#source('namespaces', '/api/v1/namespaces', {}),
      this.#source('policies', '/apis/kinference.io/v1alpha1/inferencepolicies', {}),
      this.#source('providers', `/api/v1/namespaces/${agentNamespace}/configmaps`, {
        fieldSelector: `metadata.name=${providersConfigMap}`,
      }),
      this.#source('peers', `/apis/discovery.k8s.io/v1/namespaces/${agentNamespace}/endpointslices`, {
        labelSelector: `${SERVICE_NAME_LABEL}=${gossipService}`,
      }),
      ...(opts.inferencePools ? [this.#source('pools', INFERENCE_POOLS_PATH, {})] : []),
    ];
    this.#byName = Object.fromEntries(this.#sources.map((s) => [s.name, s])) as SourcesByName;
  }

  #source(
    name: SourceName,
    path: string,
    selectors: Selectors,
    slim?: (item: KubernetesObject) => KubernetesObject,
  ): Source {
    const kc = this.#kc;
    const { watch, list: listOptions } = this.#settings;
    const transport: ResumingWatch = new ResumingWatch(kc, {
      idleTimeoutMs: watch.idleTimeoutMs,
      connectTimeoutMs: watch.connectTimeoutMs,
      timeoutSeconds: () => watch.timeoutSeconds * (1 + this.#rand() / 2),
      onEstablished: () => this.#connected(src),
      onInternalError: (err) => this.#failed(src, err),
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
        setImmediate(() => this.#listed(src));
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
    informer.on('change', () => this.#changed());
    informer.on('error', (err?: unknown) => this.#failed(src, err));
    return src;
  }

  #connected(src: Source): void {
    if (this.#stopped) return;
    if (!src.connected && src.lastError !== undefined) this.#log('info', `kubernetes ${src.name}: connected again`);
    src.connected = true;
    src.attempt = 0;
  }

  #listed(src: Source): void {
    if (this.#stopped) return;
    this.#connected(src);
    if (!src.synced) {
      src.synced = true;
      if (this.#sources.every((s) => s.synced)) {
        this.#recompute();
        this.#onSynced?.();
      }
    }
    this.#changed();
  }

  #failed(src: Source, err: unknown): void {
    if (this.#stopped) return;
    const message = describeError(err);
    if (src.connected || src.lastError !== message)
      this.#log('warn', `kubernetes ${src.name}: ${message}; keeping the last view`);
    src.connected = false;
    src.lastError =
      src.name === 'policies' && / 404\b/.test(message)
        ? `${message} (is the InferencePolicy CRD installed?)`
        : message;
    src.lastErrorAt = this.#now();
    if (src.restart) return;
    const { backoffInitialMs, backoffMaxMs } = this.#settings;
    const delay = Math.min(backoffMaxMs, backoffInitialMs * 2 ** src.attempt) * (0.5 + this.#rand() / 2);
    src.attempt++;
    src.restart = setTimeout(() => {
      src.restart = undefined;
      if (!this.#stopped) this.#run(src);
    }, delay);
  }

  #run(src: Source): void {
    src.informer.start().catch((err: unknown) => this.#failed(src, err));
  }

  #changed(): void {
    if (this.#stopped || this.#debounce) return;
    this.#debounce = setTimeout(() => {
      this.#debounce = undefined;
      this.#recompute();
    }, this.#settings.debounceMs);
  }

  #currentProviders(): ProviderSettings[] {
    const { agentNamespace, providersConfigMap } = this.#settings;
    const cm = this.#byName.providers.informer.list().find((o) => o.metadata?.name === providersConfigMap) as
      ConfigMapObject | undefined;
    const version = cm ? (cm.metadata?.resourceVersion ?? JSON.stringify(cm.data)) : 'absent';
    if (version === this.#providersVersion) return this.#providers;
    this.#providersVersion = version;
    try {
      this.#providers = cm ? parseProvidersConfigMap(cm.data, `configmap ${agentNamespace}/${providersConfigMap}`) : [];
      this.#providersProblem = undefined;
    } catch (err) {
      this.#providersProblem = `${(err as Error).message} (keeping the last good provider list)`;
      this.#log('warn', this.#providersProblem);
    }
    return this.#providers;
  }

  #recompute(): void {
    if (this.#stopped || !this.#sources.every((s) => s.synced)) return;
    const { node, podLabel, agentNamespace } = this.#settings;
    const byName = this.#byName;
    const pods = byName.pods.informer.list() as PodObject[];
    const agentSlices = byName.peers.informer.list() as EndpointSliceObject[];
    const peerOptions = { node, podIP: this.#opts.podIP, gossipPort: this.#opts.gossipPort };
    const members = byName.pools ? poolMembers(byName.pools.informer.list() as InferencePoolObject[]) : undefined;
    const next: ClusterSnapshot = {
      pods: modelServerPods(pods, node, podLabel, members),
      namespaces: namespaceAnnotations(byName.namespaces.informer.list()),
      policies: policyObjects(byName.policies.informer.list(), agentNamespace),
      providers: this.#currentProviders(),
      peers: peerAddresses(agentSlices, peerOptions),
      gossipMembers: gossipMembers(agentSlices, peerOptions),
      callers: callersByIp(pods),
      peerPods: { kind: 'cluster', pods: servingPodsByIp(pods, podLabel, members) },
    };
    const key = snapshotKey(next);
    if (this.#published && key === this.#currentKey) return;
    this.#published = true;
    this.#current = next;
    this.#currentKey = key;
    for (const listener of this.#listeners) {
      try {
        listener();
      } catch (err) {
        this.#log('warn', `discovery listener failed: ${describeError(err)}`);
      }
    }
  }

  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    const synced = new Promise<void>((resolve) => {
      this.#onSynced = resolve;
    });
    for (const src of this.#sources) this.#run(src);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, this.#settings.syncTimeoutMs);
    });
    await Promise.race([synced, timeout]);
    clearTimeout(timer);
  }

  snapshot(): ClusterSnapshot {
    return this.#current;
  }

  onChange(listener: () => void): void {
    this.#listeners.push(listener);
  }

  status(): KubernetesDiscoveryStatus {
    return discoveryStatus(this.#sources, this.#providersProblem);
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#debounce);
    this.#debounce = undefined;
    for (const src of this.#sources) {
      clearTimeout(src.restart);
      src.restart = undefined;
      src.transport.close();
    }
    await Promise.all(this.#sources.map((s) => s.informer.stop()));
    this.#onSynced?.();
  }
}

/** What decides whether listeners hear of a new snapshot: its content, Maps included. */
function snapshotKey(next: ClusterSnapshot): string {
  return JSON.stringify([
    next.pods,
    [...next.namespaces],
    next.policies,
    next.providers,
    next.peers,
    next.gossipMembers,
    [...next.callers],
    [...(next.peerPods!.kind === 'cluster' ? next.peerPods!.pods : [])],
  ]);
}

/** Each source's health, and the most recent error of those down. */
function discoveryStatus(sources: readonly Source[], providersProblem: string | undefined): KubernetesDiscoveryStatus {
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
}
