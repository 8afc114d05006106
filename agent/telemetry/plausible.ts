// The trust boundary for what a pod's /metrics page says. A model server is not an authority on
// the router: a page with a negative queue, NaN, ±Inf, absurd magnitudes or counters moving in
// both directions at once would otherwise become a score that wins every decision. An
// implausible page is refused whole (the pod is unhealthy until a plausible one comes). Pure.
import type { PodLoad } from '../types.ts';

export interface PlausibilityBounds {
  /** Largest believable queue or batch size of one pod (requests). */
  maxRequests: number;
  /** Largest believable cumulative counter or histogram sum (tokens, requests, seconds). */
  maxCounter: number;
}

export const DEFAULT_PLAUSIBILITY: PlausibilityBounds = { maxRequests: 100_000, maxCounter: 1e15 };

const GAUGES = ['waiting', 'running'] as const;
const COUNTERS = [
  'ttftSum',
  'ttftCount',
  'queueTimeSum',
  'queueTimeCount',
  'promptTokens',
  'generationTokens',
  'finished',
] as const;

function describeNumber(x: number): string {
  return Number.isNaN(x) ? 'NaN' : String(x);
}

/**
 * Why `load` cannot be believed (given the pod's previous good load), or undefined when it can.
 * A restart resets every counter to near zero, so counters going down are a restart only when
 * none went up in the same interval.
 */
export function implausibility(
  load: PodLoad,
  previous: PodLoad | undefined,
  bounds: PlausibilityBounds = DEFAULT_PLAUSIBILITY,
): string | undefined {
  for (const name of GAUGES) {
    const value = load[name];
    if (!Number.isFinite(value) || value < 0 || value > bounds.maxRequests) {
      return `${name} = ${describeNumber(value)} (expected 0..${bounds.maxRequests})`;
    }
  }
  // NaN means "not reported" for KV use (TGI); anything reported must be a fraction.
  if (!Number.isNaN(load.kvCache) && !(load.kvCache >= 0 && load.kvCache <= 1)) {
    return `kvCache = ${describeNumber(load.kvCache)} (expected 0..1)`;
  }
  let wentDown: string | undefined;
  let wentUp = false;
  for (const name of COUNTERS) {
    const value = load[name];
    if (value === undefined) continue;
    if (!Number.isFinite(value) || value < 0 || value > bounds.maxCounter) {
      return `${name} = ${describeNumber(value)} (expected 0..${bounds.maxCounter})`;
    }
    const before = previous?.[name];
    if (before === undefined) continue;
    if (value < before) wentDown ??= `${name} went from ${before} to ${value}`;
    else if (value > before) wentUp = true;
  }
  if (wentDown !== undefined && wentUp) return `counters went backwards without a restart: ${wentDown}`;
  return undefined;
}
