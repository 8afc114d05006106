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

function describeNumber(x: number): string {
  return Number.isNaN(x) ? 'NaN' : String(x);
}

/** What `counter` saw of the counters so far: the first that went down, and whether any went up. */
let wentDown: string | undefined;
let wentUp = false;

/** A gauge's verdict: undefined when believable. */
function gauge(name: string, value: number, bounds: PlausibilityBounds): string | undefined {
  if (Number.isFinite(value) && value >= 0 && value <= bounds.maxRequests) return undefined;
  return `${name} = ${describeNumber(value)} (expected 0..${bounds.maxRequests})`;
}

/** A counter's verdict (undefined when believable, or absent); notes its direction since `before`. */
function counter(name: string, value: number | undefined, before: number | undefined, bounds: PlausibilityBounds) {
  if (value === undefined) return undefined;
  if (!Number.isFinite(value) || value < 0 || value > bounds.maxCounter)
    return `${name} = ${describeNumber(value)} (expected 0..${bounds.maxCounter})`;
  if (before === undefined) return undefined;
  if (value < before) wentDown ??= `${name} went from ${before} to ${value}`;
  else if (value > before) wentUp = true;
  return undefined;
}

/**
 * Why `load` cannot be believed (given the pod's previous good load), or undefined when it can.
 * A restart resets every counter to near zero, so counters going down are a restart only when
 * none went up in the same interval. Each field is read by its name (not a loop over names: a
 * read by a computed key on loads of several engines' shapes is a generic lookup that boxes every
 * number it returns, most of this function's cost on every scrape).
 */
export function implausibility(
  load: PodLoad,
  previous: PodLoad | undefined,
  bounds: PlausibilityBounds = DEFAULT_PLAUSIBILITY,
): string | undefined {
  const badGauge = gauge('waiting', load.waiting, bounds) ?? gauge('running', load.running, bounds);
  if (badGauge !== undefined) return badGauge;
  // NaN means "not reported" for KV use (TGI); anything reported must be a fraction.
  if (!Number.isNaN(load.kvCache) && !(load.kvCache >= 0 && load.kvCache <= 1)) {
    return `kvCache = ${describeNumber(load.kvCache)} (expected 0..1)`;
  }
  wentDown = undefined;
  wentUp = false;
  const badCounter =
    counter('ttftSum', load.ttftSum, previous?.ttftSum, bounds) ??
    counter('ttftCount', load.ttftCount, previous?.ttftCount, bounds) ??
    counter('queueTimeSum', load.queueTimeSum, previous?.queueTimeSum, bounds) ??
    counter('queueTimeCount', load.queueTimeCount, previous?.queueTimeCount, bounds) ??
    counter('promptTokens', load.promptTokens, previous?.promptTokens, bounds) ??
    counter('generationTokens', load.generationTokens, previous?.generationTokens, bounds) ??
    counter('finished', load.finished, previous?.finished, bounds);
  if (badCounter !== undefined) return badCounter;
  if (wentDown !== undefined && wentUp) return `counters went backwards without a restart: ${wentDown}`;
  return undefined;
}
