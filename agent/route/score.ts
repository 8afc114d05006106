// Scorers: lower is better, in predicted milliseconds until the client sees its first token.
import { predictWith } from '../predict/predictor.ts';
import type { RouteRequest } from '../types.ts';
import type { Candidate } from './candidate.ts';

export type Scorer = (c: Candidate, r: RouteRequest) => number;

/**
 * Predicted TTFT at the pod, counting the requests this agent sent since the pod's last report
 * as queue the pod hasn't shown yet (between scrapes every agent sees the same stale queue, so
 * without this a burst would all land on the one pod that looked idle), plus the network cost.
 */
export const predictedTtft: Scorer = (c, r) =>
  predictWith(c.params, { queued: c.queuedNow + c.unseenSent, running: c.running, promptTokens: r.promptTokens }) +
  c.networkCostMs;
