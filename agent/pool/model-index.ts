// Per-model candidate indexes, rebuilt when pods come or go (never per request), so a decision
// costs the same however many pods and models the cluster has.
import type { Pod, PodEstimate, RouteRequest } from '../types.ts';
import { REFERENCE_REQUEST } from './candidates.ts';

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
 * Per model, the peers' pods predicted fastest for a typical request of that model now, at most
 * `limit`: what a decision looks at among peers' pods.
 */
export function peerShortlists(
  remote: readonly PodEstimate[],
  limit: number,
  predictMs: (estimate: PodEstimate, reference: RouteRequest) => number,
): Map<string, PodEstimate[]> {
  const byModel = indexByModel(remote);
  for (const [model, list] of byModel) {
    if (list.length <= limit) continue;
    const reference = { ...REFERENCE_REQUEST, model };
    const ranked = list.map((e) => ({ e, ms: predictMs(e, reference) }));
    ranked.sort((a, b) => a.ms - b.ms);
    byModel.set(
      model,
      ranked.slice(0, limit).map((r) => r.e),
    );
  }
  return byModel;
}
