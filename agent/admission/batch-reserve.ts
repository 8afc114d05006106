// The share of a pod's batch that requests which may leave leave free for those which may not,
// sized from what the pod's must-stay requests measure rather than fixed. A must-stay request
// has nowhere else to go: on an engine serving in arrival order, one that finds the batch full
// waits for a slot, and a leavable request admitted to the last free slot is what made it wait.
//
// The law, per must-stay request the pod answers: one that found the batch without a free slot
// (full, or a queue) and answered after its SLO raises the reserve by `step`; every other one
// lowers it by step · lateShare / (1 − lateShare). The drift is zero when `lateShare` of the
// pod's must-stay requests are late for want of a slot, so a pool whose must-stay requests find
// slots (few of them, or a batch that rarely fills) reserves little, and one where they queue
// behind leavable ones reserves more: up to `max`. A late answer from a pod with a free slot
// (a prompt too long for the SLO, a slow pod) says nothing about slots and only lowers it.
// A pod starts at `max` (a pod not yet measured protects its must-stay requests), so the reserve
// only ever gives back what the pod's own must-stay requests show they do not need. Rising is
// fast (a few late answers), falling slow, as the loop on attainment does (threshold.ts): at 1%
// a share falls by 0.1 over about a hundred answers. Pure: the caller keeps the share per pod.

export interface BatchReserveOptions {
  /** The highest share, and a new pod's: at most this much of a batch is kept from leavable requests. */
  max: number;
  /** What one late must-stay request that found no free slot adds. */
  step: number;
  /** The share of must-stay requests late for want of a slot the reserve settles at. */
  lateShare: number;
}

export const DEFAULT_BATCH_RESERVE: BatchReserveOptions = {
  max: 0.375,
  step: 0.1,
  lateShare: 0.01,
};

/** The reserve after one must-stay request's answer: `foundFull` at send, `late` against its SLO. */
export function nextBatchReserve(share: number, foundFull: boolean, late: boolean, o: BatchReserveOptions): number {
  const moved = foundFull && late ? share + o.step : share - (o.step * o.lateShare) / (1 - o.lateShare);
  return Math.min(o.max, Math.max(0, moved));
}
