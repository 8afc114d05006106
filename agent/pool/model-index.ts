// Per-model candidate indexes, rebuilt when pods come or go (never per request), so a decision
// costs the same however many pods and models the cluster has.
import type { Pod, PodEstimate } from '../types.ts';

/** Each item under every model its pod serves. */
export function indexByModel<T extends { pod: Pod }>(items: Iterable<T>): Map<string, T[]> {
  const byModel = new Map<string, T[]>();
  for (const item of items) {
    for (const model of item.pod.models) {
      const list = byModel.get(model);
      if (list) list.push(item);
      else byModel.set(model, [item]);
    }
  }
  return byModel;
}

/**
 * Per model, the first `limit` of `ranked` (peers' pods, fastest predicted first) that serve it:
 * what a decision looks at among peers' pods.
 */
export function peerShortlists(ranked: readonly PodEstimate[], limit: number): Map<string, PodEstimate[]> {
  const byModel = indexByModel(ranked);
  for (const [model, list] of byModel) if (list.length > limit) byModel.set(model, list.slice(0, limit));
  return byModel;
}

/** The fastest of `ranked` on each node (fastest predicted first), in that order. */
export function fastestPerNode(ranked: readonly PodEstimate[]): PodEstimate[] {
  const seen = new Set<string>();
  return ranked.filter((e) => !seen.has(e.pod.node) && seen.add(e.pod.node));
}
