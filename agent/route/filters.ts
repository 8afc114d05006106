// Filters: each says why a candidate cannot take this request, or nothing.
import type { EffectivePolicy, ExcludeRule, RouteRequest } from '../types.ts';
import type { Candidate } from './candidate.ts';

export type DropReason =
  'model-not-served' | 'unhealthy' | 'stale' | 'implausible' | 'at-capacity' | 'excluded' | 'over-slo';

export interface Drop {
  reason: DropReason;
  detail: string;
}

/**
 * A drop whose detail is written when first read, from the numbers the filter saw: a decision's
 * drops are counted on every request (metrics) and read out only by explain and logs, and
 * formatting a number costs more than the filter that judged it.
 */
class LazyDrop<A, B, C> implements Drop {
  readonly reason: DropReason;
  readonly #format: (a: A, b: B, c: C) => string;
  readonly #a: A;
  readonly #b: B;
  readonly #c: C;
  #detail: string | undefined;

  constructor(reason: DropReason, format: (a: A, b: B, c: C) => string, a: A, b: B, c: C) {
    this.reason = reason;
    this.#format = format;
    this.#a = a;
    this.#b = b;
    this.#c = c;
  }

  get detail(): string {
    return (this.#detail ??= this.#format(this.#a, this.#b, this.#c));
  }

  /** Read like the plain `{ reason, detail }` it stands for (JSON.stringify skips getters). */
  toJSON(): Drop {
    return { reason: this.reason, detail: this.detail };
  }
}

function lazyDrop<A, B = undefined, C = undefined>(
  reason: DropReason,
  format: (a: A, b: B, c: C) => string,
  a: A,
  b?: B,
  c?: C,
): Drop {
  return new LazyDrop(reason, format, a, b as B, c as C);
}

export interface FilterContext {
  request: RouteRequest;
  policy: EffectivePolicy;
  /** Predicted TTFT + network cost for the candidate (computed once by the router). */
  predictedMs: number;
  /** The q-quantile of that TTFT (q = the admission quantile), network cost included. */
  quantileMs: number;
  /** q: the admission threshold's quantile (the policy's attainment unless a loop steers it). */
  quantile: number;
  /** The request may overflow: the SLO filter judges the quantile, not the mean. */
  mayLeave: boolean;
}

export type Filter = (c: Candidate, ctx: FilterContext) => Drop | undefined;

const round = (x: number, digits = 2) => Math.round(x * 10 ** digits) / 10 ** digits;

// The details' formats, each one function (not a closure per drop); the numbers come in as they
// were at the decision.
const servesDetail = (models: readonly string[]) => `serves ${models.join(',')}`;
const predictedDetail = (predictedMs: number) => `predicted TTFT ${predictedMs}ms`;
const countDetail = (name: string, value: number) => `${name} ${value}`;
const staleDetail = (ageMs: number, maxAgeMs: number) => `last report ${Math.round(ageMs)}ms ago (limit ${maxAgeMs}ms)`;
const excludedDetail = (rule: ExcludeRule, value: number) =>
  `${rule.metric} ${round(value)} > ${rule.above} (${rule.metric === 'predictedTTFT' ? 'now' : `avg over ${rule.windowMs / 1000}s`})`;
const overMeanDetail = (predictedMs: number, sloTtftMs: number) =>
  `predicted ${Math.round(predictedMs)}ms > SLO ${sloTtftMs}ms`;
const overQuantileDetail = (quantileMs: number, predictedMs: number, slo: { quantile: number; sloTtftMs: number }) =>
  `p${Math.round(slo.quantile * 1000) / 10} ${Math.round(quantileMs)}ms (mean ${Math.round(predictedMs)}ms) > SLO ${slo.sloTtftMs}ms`;
const capacityDetail = (inFlight: number, maxInFlight: number) =>
  `${inFlight} requests in flight (limit ${maxInFlight})`;

export const modelServed: Filter = (c, { request }) =>
  c.pod.models.includes(request.model) ? undefined : lazyDrop('model-not-served', servesDetail, c.pod.models);

export const healthy: Filter = (c) =>
  c.healthy ? undefined : { reason: 'unhealthy', detail: c.unhealthyReason ?? 'failing scrapes or requests' };

const countable = (x: number) => Number.isFinite(x) && x >= 0;

/**
 * Last line of defence for numbers from outside (a peer's gossip, a model's parameters): a
 * negative, NaN or infinite load or prediction would sort before every honest pod.
 */
export const plausible: Filter = (c, { predictedMs }) => {
  if (!countable(predictedMs)) return lazyDrop('implausible', predictedDetail, predictedMs);
  // Field by field, not a list of them: this runs for every candidate of every request.
  return (
    implausibleCount('queued', c.queuedNow) ??
    implausibleCount('running', c.running) ??
    implausibleCount('inFlight', c.inFlight) ??
    implausibleCount('unseenSent', c.unseenSent)
  );
};

function implausibleCount(name: string, value: number): Drop | undefined {
  return countable(value) ? undefined : lazyDrop('implausible', countDetail, name, value);
}

export const fresh: Filter = (c) =>
  c.ageMs <= c.maxAgeMs ? undefined : lazyDrop('stale', staleDetail, c.ageMs, c.maxAgeMs);

export const excludeRules: Filter = (c, { policy, predictedMs }) => {
  for (const rule of policy.exclude) {
    // Most windows are far from their rule's limit; the candidate can tell without the average.
    if (rule.metric !== 'predictedTTFT' && c.averageAtMost?.(rule.metric, rule.windowMs, rule.above)) continue;
    const value = rule.metric === 'predictedTTFT' ? predictedMs : c.average(rule.metric, rule.windowMs);
    if (value > rule.above) return lazyDrop('excluded', excludedDetail, rule, value);
  }
  return undefined;
};

/**
 * A request that may leave goes to a pod only if the pod answers in time with the policy's
 * confidence (its q-quantile TTFT is within the SLO): a miss there is a miss overflow would have
 * avoided. A request that may not leave has nowhere better to go, so the mean decides, as it
 * always did: the quantile would only make it wait. The mean as measured: where the model is
 * known to fall short (a full batch, Candidate.meanLogBias), raised by what it falls short by.
 */
export const withinSlo: Filter = (c, { policy, predictedMs, quantileMs, quantile, mayLeave }) => {
  if (!mayLeave) {
    const bias = c.meanLogBias?.() ?? 0;
    const meanMs = bias > 0 ? c.networkCostMs + (predictedMs - c.networkCostMs) * Math.exp(bias) : predictedMs;
    return meanMs <= policy.sloTtftMs ? undefined : lazyDrop('over-slo', overMeanDetail, meanMs, policy.sloTtftMs);
  }
  if (quantileMs <= policy.sloTtftMs) return undefined;
  return lazyDrop('over-slo', overQuantileDetail, quantileMs, predictedMs, { quantile, sloTtftMs: policy.sloTtftMs });
};

/** No hidden queue: past its connection cap a pod is not a candidate (others, overflow or a bounded wait are). */
export const hasRoom: Filter = (c) =>
  c.maxInFlight === undefined || c.inFlight < c.maxInFlight
    ? undefined
    : lazyDrop('at-capacity', capacityDetail, c.inFlight, c.maxInFlight);

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

/**
 * The first drop `filters` give `c`, in their order. Kinference's own chain is called filter by
 * filter rather than through the list: one call site per filter, where the list's one site sees
 * seven functions and V8 can inline none (every candidate of every decision passes through it).
 */
export function firstDrop(filters: readonly Filter[], c: Candidate, ctx: FilterContext): Drop | undefined {
  if (filters === DEFAULT_FILTERS) {
    return (
      modelServed(c, ctx) ??
      healthy(c, ctx) ??
      fresh(c, ctx) ??
      plausible(c, ctx) ??
      hasRoom(c, ctx) ??
      excludeRules(c, ctx) ??
      withinSlo(c, ctx)
    );
  }
  for (const filter of filters) {
    const drop = filter(c, ctx);
    if (drop) return drop;
  }
  return undefined;
}
