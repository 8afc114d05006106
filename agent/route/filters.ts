// Filters: each says why a candidate cannot take this request, or nothing.
import type { EffectivePolicy, RouteRequest } from '../types.ts';
import type { Candidate } from './candidate.ts';

export type DropReason =
  'model-not-served' | 'unhealthy' | 'stale' | 'implausible' | 'at-capacity' | 'excluded' | 'over-slo';

export interface Drop {
  reason: DropReason;
  detail: string;
}

export interface FilterContext {
  request: RouteRequest;
  policy: EffectivePolicy;
  /** Predicted TTFT + network cost for the candidate (computed once by the router). */
  predictedMs: number;
  /** The q-quantile of that TTFT (q = the policy's attainment), network cost included. */
  quantileMs: number;
  /** The request may overflow: the SLO filter judges the quantile, not the mean. */
  mayLeave: boolean;
}

export type Filter = (c: Candidate, ctx: FilterContext) => Drop | undefined;

const round = (x: number, digits = 2) => Math.round(x * 10 ** digits) / 10 ** digits;

export const modelServed: Filter = (c, { request }) =>
  c.pod.models.includes(request.model)
    ? undefined
    : { reason: 'model-not-served', detail: `serves ${c.pod.models.join(',')}` };

export const healthy: Filter = (c) =>
  c.healthy ? undefined : { reason: 'unhealthy', detail: c.unhealthyReason ?? 'failing scrapes or requests' };

const countable = (x: number) => Number.isFinite(x) && x >= 0;

/**
 * Last line of defence for numbers from outside (a peer's gossip, a model's parameters): a
 * negative, NaN or infinite load or prediction would sort before every honest pod.
 */
export const plausible: Filter = (c, { predictedMs }) => {
  if (!countable(predictedMs)) return { reason: 'implausible', detail: `predicted TTFT ${predictedMs}ms` };
  // Field by field, not a list of them: this runs for every candidate of every request.
  return (
    implausibleCount('queued', c.queuedNow) ??
    implausibleCount('running', c.running) ??
    implausibleCount('inFlight', c.inFlight) ??
    implausibleCount('unseenSent', c.unseenSent)
  );
};

function implausibleCount(name: string, value: number): Drop | undefined {
  return countable(value) ? undefined : { reason: 'implausible', detail: `${name} ${value}` };
}

export const fresh: Filter = (c) =>
  c.ageMs <= c.maxAgeMs
    ? undefined
    : { reason: 'stale', detail: `last report ${Math.round(c.ageMs)}ms ago (limit ${c.maxAgeMs}ms)` };

export const excludeRules: Filter = (c, { policy, predictedMs }) => {
  for (const rule of policy.exclude) {
    const value = rule.metric === 'predictedTTFT' ? predictedMs : c.average(rule.metric, rule.windowMs);
    if (value > rule.above) {
      const over = rule.metric === 'predictedTTFT' ? 'now' : `avg over ${rule.windowMs / 1000}s`;
      return { reason: 'excluded', detail: `${rule.metric} ${round(value)} > ${rule.above} (${over})` };
    }
  }
  return undefined;
};

/**
 * A request that may leave goes to a pod only if the pod answers in time with the policy's
 * confidence (its q-quantile TTFT is within the SLO): a miss there is a miss overflow would have
 * avoided. A request that may not leave has nowhere better to go, so the mean decides, as it
 * always did: the quantile would only make it wait.
 */
export const withinSlo: Filter = (c, { policy, predictedMs, quantileMs, mayLeave }) => {
  if (!mayLeave) {
    return predictedMs <= policy.sloTtftMs
      ? undefined
      : { reason: 'over-slo', detail: `predicted ${Math.round(predictedMs)}ms > SLO ${policy.sloTtftMs}ms` };
  }
  if (quantileMs <= policy.sloTtftMs) return undefined;
  const pct = Math.round(policy.sloAttainment * 1000) / 10;
  return {
    reason: 'over-slo',
    detail: `p${pct} ${Math.round(quantileMs)}ms (mean ${Math.round(predictedMs)}ms) > SLO ${policy.sloTtftMs}ms`,
  };
};

/** No hidden queue: past its connection cap a pod is not a candidate (others, overflow or a bounded wait are). */
export const hasRoom: Filter = (c) =>
  c.maxInFlight === undefined || c.inFlight < c.maxInFlight
    ? undefined
    : { reason: 'at-capacity', detail: `${c.inFlight} requests in flight (limit ${c.maxInFlight})` };

/** Kinference's filter chain, cheapest first. */
export const DEFAULT_FILTERS: readonly Filter[] = [
  modelServed,
  healthy,
  fresh,
  plausible,
  hasRoom,
  excludeRules,
  withinSlo,
];
