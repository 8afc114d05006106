// Where the world comes from. Static mode reads it from the config file; Kubernetes mode from
// informers. Either way the agent sees one snapshot shape and a change signal.
import type { Pod } from '../types.ts';
import type { ProviderSettings } from '../providers/types.ts';
import type { DetectorSpec } from '../classify/custom.ts';

export interface Caller {
  namespace: string;
  pod: string;
}

export interface ClusterSnapshot {
  /** Model-server pods on this node. */
  pods: Pod[];
  /** Namespace name → its annotations (kinference.io/* shortcuts). */
  namespaces: Map<string, Record<string, string>>;
  /** InferencePolicy objects as found (apiVersion/kind optional); validated by agent/policy. */
  policies: unknown[];
  providers: ProviderSettings[];
  /** Gossip addresses (host:port) of the other agents. */
  peers: string[];
  /**
   * The agents among them the cluster says are live (Kubernetes: ready endpoints); absent: all
   * of the peers (static mode: the file's list). Gossip stops reading an agent's estimates as soon
   * as it leaves this list.
   */
  gossipMembers?: string[];
  /** Pod IP anywhere in the cluster → who is calling (its namespace is the tenant). */
  callers: Map<string, Caller>;
  /** What a gossiped pod must match to be routable; absent: no gossiped pod is (fail closed). */
  peerPods?: PeerPodRules;
  /** Platform detectors, when the source can change them at run time (static: the config file). */
  detectors?: DetectorSpec[];
}

export type PeerPodRules =
  /** Kubernetes: the API's routable model-server pods, by IP. */
  | { kind: 'cluster'; pods: ReadonlyMap<string, { namespace: string; name: string; node: string }> }
  /** Static: address ranges the operator declared (`gossip.peerPodCidrs`). */
  | { kind: 'cidrs'; cidrs: readonly string[] };

export interface DiscoveryStatus {
  /** Every source has listed at least once. */
  synced: boolean;
  /** All watches are connected now (false: serving the last known view). */
  connected: boolean;
  lastError?: string;
}

export interface Discovery {
  start(): Promise<void>;
  snapshot(): ClusterSnapshot;
  /** Called (debounced by the implementation) after any change to the snapshot. */
  onChange(listener: () => void): void;
  status(): DiscoveryStatus;
  stop(): Promise<void>;
}
