// What the agent remembers about one pod between scrapes: the latest load, sliding windows of the
// gauges policies name (`exclude: {metric: queued, window: 30s}`), and what changed in the last
// interval. Pure: time comes from the loads themselves or from the caller.

import type { WindowedMetric } from '../route/candidate.ts';
import type { IntervalDelta, MeanDelta, PodLoad } from '../types.ts';
import { TimeWindow, type WindowOptions } from './window.ts';

/** Increase of a cumulative counter; a decrease means the server restarted, counting from zero. */
function increase(previous: number | undefined, current: number | undefined): number | undefined {
  if (previous === undefined || current === undefined) return undefined;
  return current >= previous ? current - previous : current;
}

function meanDelta(
  prevSum: number | undefined,
  prevCount: number | undefined,
  sum: number | undefined,
  count: number | undefined,
): MeanDelta | undefined {
  if (prevSum === undefined || prevCount === undefined || sum === undefined || count === undefined) return undefined;
  const reset = count < prevCount || sum < prevSum;
  const dCount = reset ? count : count - prevCount;
  const dSum = reset ? sum : sum - prevSum;
  return { count: dCount, sum: dSum, mean: dCount > 0 ? dSum / dCount : NaN };
}

export function intervalDelta(previous: PodLoad, current: PodLoad): IntervalDelta {
  const delta: IntervalDelta = { intervalMs: current.at - previous.at };
  const ttft = meanDelta(previous.ttftSum, previous.ttftCount, current.ttftSum, current.ttftCount);
  if (ttft) delta.ttft = ttft;
  const queueTime = meanDelta(
    previous.queueTimeSum,
    previous.queueTimeCount,
    current.queueTimeSum,
    current.queueTimeCount,
  );
  if (queueTime) delta.queueTime = queueTime;
  const finished = increase(previous.finished, current.finished);
  if (finished !== undefined) delta.finished = finished;
  const promptTokens = increase(previous.promptTokens, current.promptTokens);
  if (promptTokens !== undefined) delta.promptTokens = promptTokens;
  const queries = increase(previous.prefixCacheQueries, current.prefixCacheQueries);
  const hits = increase(previous.prefixCacheHits, current.prefixCacheHits);
  if (queries !== undefined && hits !== undefined) delta.computedPromptTokens = Math.max(0, queries - hits);
  else if (promptTokens !== undefined && current.prefixCacheHitRate !== undefined)
    delta.computedPromptTokens = promptTokens * (1 - current.prefixCacheHitRate);
  const generationTokens = increase(previous.generationTokens, current.generationTokens);
  if (generationTokens !== undefined) delta.generationTokens = generationTokens;
  return delta;
}

export class PodTelemetry {
  readonly waiting: TimeWindow;
  readonly running: TimeWindow;
  readonly kvCache: TimeWindow;
  #latest: PodLoad | undefined;
  #previous: PodLoad | undefined;
  #lastDelta: IntervalDelta | undefined;

  constructor(windows: Partial<WindowOptions> = {}) {
    this.waiting = new TimeWindow(windows);
    this.running = new TimeWindow(windows);
    this.kvCache = new TimeWindow(windows);
  }

  get latest(): PodLoad | undefined {
    return this.#latest;
  }

  /** The good scrape before the latest one. */
  get previous(): PodLoad | undefined {
    return this.#previous;
  }

  /** Change between the last two good scrapes. */
  get lastDelta(): IntervalDelta | undefined {
    return this.#lastDelta;
  }

  /** Takes a new load; returns its change from the previous one (undefined for the first). */
  record(load: PodLoad): IntervalDelta | undefined {
    const previous = this.#latest;
    if (previous !== undefined && load.at < previous.at) return undefined; // late: keep time moving forward
    this.waiting.record(load.at, load.waiting);
    this.running.record(load.at, load.running);
    this.kvCache.record(load.at, load.kvCache);
    this.#previous = previous;
    this.#latest = load;
    this.#lastDelta = previous === undefined ? undefined : intervalDelta(previous, load);
    return this.#lastDelta;
  }

  /**
   * Marks the pod's numbers unknown from `at` (e.g. its scrapes fail), so an old queue length
   * is not averaged into windows as if it still held.
   */
  markUnknown(at: number): void {
    this.waiting.record(at, NaN);
    this.running.record(at, NaN);
    this.kvCache.record(at, NaN);
  }

  /** The sliding window of a gauge, by the name policies give it. */
  window(metric: WindowedMetric): TimeWindow {
    return metric === 'queued' ? this.waiting : metric === 'running' ? this.running : this.kvCache;
  }

  /** Time-weighted mean of a gauge over the last `windowMs`; `now` defaults to the last scrape. */
  average(metric: WindowedMetric, windowMs: number, now = this.#now()): number {
    return this.window(metric).average(windowMs, now);
  }

  /** Whether the gauge's average over the last `windowMs` is certainly at most `limit` (TimeWindow.averageAtMost). */
  averageAtMost(metric: WindowedMetric, windowMs: number, limit: number, now = this.#now()): boolean {
    return this.window(metric).averageAtMost(windowMs, now, limit);
  }

  /** Highest value of a gauge over the last `windowMs`; `now` defaults to the last scrape. */
  max(metric: WindowedMetric, windowMs: number, now = this.#now()): number {
    return this.window(metric).max(windowMs, now);
  }

  #now(): number {
    return this.#latest?.at ?? NaN;
  }
}
