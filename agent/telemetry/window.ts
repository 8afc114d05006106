// Sliding time windows over a gauge sampled at each scrape (waiting, running, KV use).
//
// Pure: time comes in with every call. Memory is fixed: a ring of time buckets covering the
// longest window any policy names, whatever the scrape rate (25 ms scrapes over 60 s are 2,400
// samples; 120 buckets of 500 ms are always 120).
//
// Averages are time-weighted: a scraped value holds until the next scrape, and each bucket keeps
// the integral of that step function. A plain sample average would over-weight bursts of fast
// scrapes and under-weight the periods where scrapes were slow or failing — exactly the moments
// when the pod was busiest.

export interface WindowOptions {
  /** Longest window that will be asked for; longer queries are clamped to it. */
  spanMs: number;
  /** Resolution. A window's oldest bucket is pro-rated, so the error is below one bucket. */
  bucketMs: number;
}

export const DEFAULT_WINDOW_OPTIONS: WindowOptions = { spanMs: 60_000, bucketMs: 500 };

/** A slot's numbers in TimeWindow's cells, at these offsets. */
const CELL = 4;
const EPOCH = 0;
const INTEGRAL = 1;
const COVERED = 2;
const MAX = 3;

export class TimeWindow {
  readonly spanMs: number;
  readonly bucketMs: number;
  readonly #size: number;
  /**
   * Four numbers per slot, side by side: the absolute bucket number it holds (a slot holding an
   * older number is empty; NaN matches none), ∫ value dt over the covered part of the bucket
   * (value·ms), the milliseconds of it covered by a known value, and the largest value held
   * during it. One array, not four: V8 checks a typed array's map and buffer at every access in
   * a loop, and an average reads three numbers per bucket.
   */
  readonly #cells: Float64Array;
  #lastAt = NaN;
  #lastValue = NaN;
  /** Counts records: the buckets change only with one. */
  #version = 0;
  /** What averageAtMost keeps between records: the sums of the whole buckets of one span. */
  readonly #kept = { version: -1, first: NaN, last: NaN, integral: 0, covered: 0, magnitude: 0 };

  constructor(options: Partial<WindowOptions> = {}) {
    const { spanMs, bucketMs } = { ...DEFAULT_WINDOW_OPTIONS, ...options };
    if (!(bucketMs > 0) || !(spanMs >= bucketMs))
      throw new Error(`invalid window: span ${spanMs} ms, bucket ${bucketMs} ms`);
    this.spanMs = spanMs;
    this.bucketMs = bucketMs;
    this.#size = Math.ceil(spanMs / bucketMs) + 1; // +1: the bucket in progress
    this.#cells = new Float64Array(this.#size * CELL);
    for (let at = 0; at < this.#cells.length; at += CELL) this.#cells[at + EPOCH] = NaN;
  }

  /** The last recorded value (NaN before the first, or when the last was NaN). */
  get last(): number {
    return this.#lastValue;
  }

  /**
   * Record the value observed at `at` (ms). Out-of-order samples are dropped. A NaN value means
   * "unknown from here on": the time until the next sample counts toward no average.
   */
  record(at: number, value: number): void {
    if (!Number.isFinite(at) || at < this.#lastAt) return;
    this.#version++;
    if (!Number.isNaN(this.#lastAt)) this.#hold(this.#lastAt, at, this.#lastValue);
    this.#lastAt = at;
    this.#lastValue = value;
    if (!Number.isNaN(value)) {
      const cell = this.#cellFor(Math.floor(at / this.bucketMs));
      if (value > this.#cells[cell + MAX]) this.#cells[cell + MAX] = value;
    }
  }

  /** Time-weighted average over `[now - windowMs, now]`; NaN when nothing is known there. */
  average(windowMs: number, now: number): number {
    const from = now - Math.min(windowMs, this.spanMs);
    let integral = 0;
    let covered = 0;
    // The bucket loop written out in each reader, not a visitor: sums a closure captures live in a
    // context, where every addition is a new heap number (≈ 2 per bucket, for every local
    // candidate of every decision under a windowed rule).
    // The cell steps with the bucket instead of a modulo per bucket, as an int32: every local
    // candidate of every decision reads a window (a 30 s rule is 61 buckets), and bucket numbers
    // of real clocks are past int32, where % is a floating-point remainder.
    const first = Math.floor(from / this.bucketMs);
    const last = Math.floor(now / this.bucketMs);
    const cells = this.#cells;
    const end = (this.#size * CELL) | 0;
    let b = Math.max(first, last - this.#size + 1);
    let cell = (this.#slotOf(b) * CELL) | 0; // (NaN, without a clock, visits nothing)
    // The oldest bucket is pro-rated; the rest weigh 1 and are added as they are (x · 1 is x: the
    // same sums, in the same order, as weighing every bucket).
    if (b === first && b <= last) {
      if (cells[cell + EPOCH] === b) {
        const weight = ((b + 1) * this.bucketMs - from) / this.bucketMs;
        integral += cells[cell + INTEGRAL] * weight;
        covered += cells[cell + COVERED] * weight;
      }
      b++;
      cell = (cell + CELL) | 0;
      if (cell === end) cell = 0;
    }
    for (; b <= last; b++) {
      if (cells[cell + EPOCH] === b) {
        integral += cells[cell + INTEGRAL];
        covered += cells[cell + COVERED];
      }
      cell = (cell + CELL) | 0;
      if (cell === end) cell = 0;
    }
    // The last value still holds from the last sample until now; it is not in the buckets yet.
    if (!Number.isNaN(this.#lastValue) && now > this.#lastAt) {
      const held = now - Math.max(this.#lastAt, from);
      if (held > 0) {
        integral += this.#lastValue * held;
        covered += held;
      }
    }
    if (covered > 0) return integral / covered;
    // A sample exactly at `now` with no time elapsed yet: that value is the best answer.
    return this.#lastAt >= from ? this.#lastValue : NaN;
  }

  /**
   * Whether `average(windowMs, now) <= limit`, when that is certain without adding the buckets up;
   * false when it is not (the caller then computes the average). An exclusion rule asks this of
   * every local candidate of every decision, and the answer is rarely close: the whole buckets'
   * sums are kept from one record to the next and the two ends added to them. That is another
   * order of the same terms (at most size + 1 of them), so it differs from average()'s sum by at
   * most 2·γ(size + 1)·Σ|term| (γ(n) = n·u/(1 − n·u), u = 2^-53), the covered time likewise, and
   * the quotients by about that relative to Σ|term|/covered + |average| (plus a rounding each).
   * The slack below is four times that bound: within it, the answer is "not certain".
   */
  averageAtMost(windowMs: number, now: number, limit: number): boolean {
    const from = now - Math.min(windowMs, this.spanMs);
    const first = Math.floor(from / this.bucketMs);
    const last = Math.floor(now / this.bucketMs);
    if (!(first <= last)) return false;
    const start = Math.max(first, last - this.#size + 1);
    const kept = this.#kept;
    if (kept.version !== this.#version || kept.first !== first || kept.last !== last) {
      // The buckets after a pro-rated first one (all of them when the span cuts the window short).
      let integral = 0;
      let covered = 0;
      let magnitude = 0;
      const cells = this.#cells;
      for (let b = start === first ? start + 1 : start; b <= last; b++) {
        const cell = this.#slotOf(b) * CELL;
        if (cells[cell + EPOCH] !== b) continue;
        integral += cells[cell + INTEGRAL];
        covered += cells[cell + COVERED];
        magnitude += Math.abs(cells[cell + INTEGRAL]);
      }
      kept.version = this.#version;
      kept.first = first;
      kept.last = last;
      kept.integral = integral;
      kept.covered = covered;
      kept.magnitude = magnitude;
    }
    let integral = kept.integral;
    let covered = kept.covered;
    let magnitude = kept.magnitude;
    if (start === first) {
      const cell = this.#slotOf(first) * CELL;
      if (this.#cells[cell + EPOCH] === first) {
        // The same weight and products as average(): only the order of the additions differs.
        const weight = ((first + 1) * this.bucketMs - from) / this.bucketMs;
        const part = this.#cells[cell + INTEGRAL] * weight;
        integral += part;
        covered += this.#cells[cell + COVERED] * weight;
        magnitude += Math.abs(part);
      }
    }
    if (!Number.isNaN(this.#lastValue) && now > this.#lastAt) {
      const held = now - Math.max(this.#lastAt, from);
      if (held > 0) {
        const part = this.#lastValue * held;
        integral += part;
        covered += held;
        magnitude += Math.abs(part);
      }
    }
    if (!(covered > 0) || !Number.isFinite(magnitude)) return false;
    const average = integral / covered;
    const slack = (this.#size + 5) * 2 ** -50 * (magnitude / covered + Math.abs(average));
    return average + slack <= limit;
  }

  /** Largest value held at any time in the window (to bucket resolution); NaN when none. */
  max(windowMs: number, now: number): number {
    const from = now - Math.min(windowMs, this.spanMs);
    let best = -Infinity;
    const last = Math.floor(now / this.bucketMs);
    const cells = this.#cells;
    for (let b = Math.max(Math.floor(from / this.bucketMs), last - this.#size + 1); b <= last; b++) {
      const cell = this.#slotOf(b) * CELL;
      if (cells[cell + EPOCH] === b && cells[cell + MAX] > best) best = cells[cell + MAX];
    }
    if (!Number.isNaN(this.#lastValue) && this.#lastValue > best && this.#lastAt <= now) best = this.#lastValue;
    return best === -Infinity ? NaN : best;
  }

  /** Adds `value` held over [from, to) to the buckets it spans. */
  #hold(from: number, to: number, value: number): void {
    if (Number.isNaN(value) || to <= from) return;
    from = Math.max(from, to - this.#size * this.bucketMs); // a long gap: only the tail is kept
    let b = Math.floor(from / this.bucketMs);
    let t = from;
    while (t < to) {
      const bucketEnd = (b + 1) * this.bucketMs;
      const segmentEnd = Math.min(bucketEnd, to);
      const cell = this.#cellFor(b);
      const cells = this.#cells;
      cells[cell + INTEGRAL] += value * (segmentEnd - t);
      cells[cell + COVERED] += segmentEnd - t;
      if (value > cells[cell + MAX]) cells[cell + MAX] = value;
      t = segmentEnd;
      b++;
    }
  }

  #slotOf(bucket: number): number {
    // A real clock's bucket numbers are past int32, where % is a floating-point remainder (a
    // slow instruction loop); the quotient gives the same slot for integers below 2^53 and is
    // checked, the remainder taking over wherever it would not (NaN included).
    const size = this.#size;
    const slot = bucket - Math.floor(bucket / size) * size;
    return slot >= 0 && slot < size ? slot : ((bucket % size) + size) % size;
  }

  /** The bucket's cell, emptied first when it held an older bucket. */
  #cellFor(bucket: number): number {
    const cell = this.#slotOf(bucket) * CELL;
    const cells = this.#cells;
    if (cells[cell + EPOCH] !== bucket) {
      cells[cell + EPOCH] = bucket;
      cells[cell + INTEGRAL] = 0;
      cells[cell + COVERED] = 0;
      cells[cell + MAX] = -Infinity;
    }
    return cell;
  }
}
