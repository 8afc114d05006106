// A warm start for local pods this agent has not measured yet: parameters learned before, by this
// agent (gossiped back by peers) or on a pod of the same class elsewhere, and the calibration of
// their errors this agent gossiped before (a prior its own observations replace).
import type { Learner } from '../predict/learner.ts';
import type { Pod, PodEstimate } from '../types.ts';
import type { LocalPod } from './pod-records.ts';

/** One calibration class: the same engine serving the same models (hardware is not reported). */
const sameClass = (a: Pod, b: Pod): boolean =>
  a.engine !== undefined && a.engine === b.engine && a.models.join(',') === b.models.join(',');

/**
 * The best prior for local pods this agent has not measured yet (a restarted agent, a new pod):
 * what it gossiped of its own pods before (peers give it back), else a pod of the same class
 * (engine and models) on another node. Only the unmeasured use it (Learner.adopt).
 */
export function warmStart(
  learner: Learner,
  node: string,
  locals: ReadonlyMap<string, LocalPod>,
  estimates: readonly PodEstimate[],
): void {
  for (const e of estimates) {
    const local = locals.get(e.pod.uid);
    if (!local || e.origin !== node) continue;
    learner.adopt(local.pod.uid, e.params);
    // Its calibration too, as a bounded prior: only this node's own agent speaks for these pods.
    if (e.calibration) learner.adoptCalibration(local.pod.uid, e.calibration);
  }
  for (const e of estimates) {
    if (e.origin === node) continue;
    for (const local of locals.values()) {
      if (!sameClass(local.pod, e.pod)) continue;
      learner.adopt(undefined, e.params);
      return;
    }
  }
}
