// Where Kubernetes discovery's settings come from: its options over the defaults, and the
// kubeconfig (in a pod: the service account; elsewhere: $KUBECONFIG or ~/.kube/config).
import { existsSync, readFileSync } from 'node:fs';
import { KubeConfig } from '@kubernetes/client-node';
import type { ClockAndRandom } from '../types.ts';
import { POOL_LABEL } from './kubernetes-snapshot.ts';

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

/** Settings resolved once from the options and their defaults. */
export function resolveSettings(opts: KubernetesDiscoveryOptions) {
  return {
    node: opts.nodeName,
    agentNamespace: opts.agentNamespace ?? defaultAgentNamespace(opts.kubeconfig === undefined),
    gossipService: opts.gossipService ?? DEFAULTS.gossipService,
    providersConfigMap: opts.providersConfigMap ?? DEFAULTS.providersConfigMap,
    podLabel: opts.podLabel ?? POOL_LABEL,
    debounceMs: opts.debounceMs ?? DEFAULTS.debounceMs,
    syncTimeoutMs: opts.syncTimeoutMs ?? DEFAULTS.syncTimeoutMs,
    backoffInitialMs: opts.backoff?.initialMs ?? DEFAULTS.backoffInitialMs,
    backoffMaxMs: opts.backoff?.maxMs ?? DEFAULTS.backoffMaxMs,
    watch: {
      idleTimeoutMs: opts.watch?.idleTimeoutMs ?? DEFAULTS.idleTimeoutMs,
      connectTimeoutMs: opts.watch?.connectTimeoutMs ?? DEFAULTS.connectTimeoutMs,
      timeoutSeconds: opts.watch?.timeoutSeconds ?? DEFAULTS.watchTimeoutSeconds,
    },
    list: {
      pageSize: opts.list?.pageSize ?? DEFAULTS.pageSize,
      timeoutMs: opts.list?.timeoutMs ?? DEFAULTS.listTimeoutMs,
    },
  };
}

export function loadKubeConfig(path: string | undefined): KubeConfig {
  if (path === undefined) return defaultKubeConfig();
  const kc = new KubeConfig();
  kc.loadFromFile(path);
  return kc;
}
