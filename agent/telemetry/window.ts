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

export class TimeWindow {
  readonly spanMs: number;
  readonly bucketMs: number;
  readonly #size: number;
  /** Absolute bucket number held by each slot; slots holding an older number are empty. */
  readonly #epoch: Float64Array;
  /** ∫ value dt over the covered part of the bucket (value·ms). */
  readonly #integral: Float64Array;
  /** Milliseconds of the bucket covered by a known value. */
  readonly #covered: Float64Array;
  /** Largest value held at any time during the bucket. */
  readonly #max: Float64Array;
  #lastAt = NaN;
  #lastValue = NaN;

  constructor(options: Partial<WindowOptions> = {}) {
    const { spanMs, bucketMs } = { ...DEFAULT_WINDOW_OPTIONS, ...options };
    if (!(bucketMs > 0) || !(spanMs >= bucketMs))
      throw new Error(`invalid window: span ${spanMs} ms, bucket ${bucketMs} ms`);
    this.spanMs = spanMs;
    this.bucketMs = bucketMs;
    this.#size = Math.ceil(spanMs / bucketMs) + 1; // +1: the bucket in progress
    this.#epoch = new Float64Array(this.#size).fill(NaN); // matches no bucket number
    this.#integral = new Float64Array(this.#size);
    this.#covered = new Float64Array(this.#size);
    this.#max = new Float64Array(this.#size);
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
    if (!Number.isNaN(this.#lastAt)) this.#hold(this.#lastAt, at, this.#lastValue);
    this.#lastAt = at;
    this.#lastValue = value;
    if (!Number.isNaN(value)) {
      const slot = this.#slotFor(Math.floor(at / this.bucketMs));
      if (value > this.#max[slot]) this.#max[slot] = value;
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
    // The slot steps with the bucket instead of a modulo per bucket: every local candidate of
    // every decision reads a window (a 30 s rule is 61 buckets), and bucket numbers of real
    // clocks are past int32, where % is a floating-point remainder.
    const first = Math.floor(from / this.bucketMs);
    const last = Math.floor(now / this.bucketMs);
    const size = this.#size;
    const epochs = this.#epoch;
    const integrals = this.#integral;
    const coverage = this.#covered;
    const start = Math.max(first, last - size + 1);
    for (let b = start, slot = this.#slotOf(start); b <= last; b++, slot = slot + 1 === size ? 0 : slot + 1) {
      if (epochs[slot] !== b) continue;
      const weight = b === first ? ((b + 1) * this.bucketMs - from) / this.bucketMs : 1;
      integral += integrals[slot] * weight;
      covered += coverage[slot] * weight;
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

  /** Largest value held at any time in the window (to bucket resolution); NaN when none. */
  max(windowMs: number, now: number): number {
    const from = now - Math.min(windowMs, this.spanMs);
    let best = -Infinity;
    const last = Math.floor(now / this.bucketMs);
    for (let b = Math.max(Math.floor(from / this.bucketMs), last - this.#size + 1); b <= last; b++) {
      const slot = this.#slotOf(b);
      if (this.#epoch[slot] === b && this.#max[slot] > best) best = this.#max[slot];
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
      const slot = this.#slotFor(b);
      this.#integral[slot] += value * (segmentEnd - t);
      this.#covered[slot] += segmentEnd - t;
      if (value > this.#max[slot]) this.#max[slot] = value;
      t = segmentEnd;
      b++;
    }
  }

  #slotOf(bucket: number): number {
    return ((bucket % this.#size) + this.#size) % this.#size;
  }

  #slotFor(bucket: number): number {
    const slot = this.#slotOf(bucket);
    if (this.#epoch[slot] !== bucket) {
      this.#epoch[slot] = bucket;
      this.#integral[slot] = 0;
      this.#covered[slot] = 0;
      this.#max[slot] = -Infinity;
    }
    return slot;
  }
}
