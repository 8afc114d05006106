// The pool as /debug/state and the dashboard show it: per-pod details with each pod's
// prediction for a typical request now, bounded in size however large the cluster.
import type { Learner } from '../predict/learner.ts';
import type { PrefixIndex } from '../prefix/index.ts';
import type { PodEstimate } from '../types.ts';
import { REFERENCE_REQUEST } from './candidates.ts';
import type { PeerTrafficBook } from './peer-traffic.ts';
import { localHealthy, type LocalPod } from './pod-records.ts';

/** What the view reads from the pool (read only). */
export interface PoolView {
  now: number;
  /** Predicted TTFT of a typical request now, for every local pod and every listed peer's pod. */
  predictedTtftMs: ReadonlyMap<string, number>;
  local: Iterable<LocalPod>;
  /** The peers' pods to list (already bounded, fastest first). */
  remote: readonly PodEstimate[];
  /** How many peers' pods are known. */
  remoteKnown: number;
  peerTraffic: PeerTrafficBook;
  learner: Learner;
  prefix: PrefixIndex;
  /** Expected cached tokens per local pod for the last prompt looked up. */
  lastLookup: ReadonlyMap<string, number>;
}

/** Every local pod, and the listed peers' pods (`remoteKnown` says how many there are). */
export function poolDebugState(view: PoolView) {
  const { now, remote, prefix, predictedTtftMs: predicted } = view;
  return {
    referencePromptTokens: REFERENCE_REQUEST.promptTokens,
    prefixIndex: prefix.memory(),
    local: [...view.local].map((l) => ({
      pod: l.pod,
      load: l.telemetry?.latest,
      queuedAvg30s: l.telemetry?.waiting.average(30_000, now) ?? null,
      ageMs: now - (l.telemetry?.latest?.at ?? -Infinity),
      inFlight: l.inFlight,
      unseenSent: l.unseenSent,
      healthy: localHealthy(l, now),
      unhealthyReason: l.implausible ?? (now < l.unhealthyUntil ? 'failed a request before its first byte' : null),
      predictedTtftMs: predicted.get(l.pod.uid),
      prefix: {
        blocks: prefix.podBlocks(l.pod.uid),
        lastRequestCachedTokens: view.lastLookup.get(l.pod.uid) ?? 0,
      },
      ...view.learner.stats(l.pod.uid),
    })),
    remoteKnown: view.remoteKnown,
    remote: remote.map((e) => ({
      ...e,
      ageMs: now - e.at,
      traffic: view.peerTraffic.get(e.pod.uid),
      predictedTtftMs: predicted.get(e.pod.uid),
    })),
  };
}
