// A cumulative Prometheus-style histogram with fixed upper bounds (seconds).

export interface HistogramSnapshot {
  /** Upper bounds, ascending, without +Inf. */
  bounds: readonly number[];
  /** Observations per bucket, NOT cumulative; one more entry than `bounds` (the +Inf bucket). */
  counts: number[];
  sum: number;
  count: number;
}

export class Histogram {
  readonly bounds: readonly number[];
  #counts: number[];
  #sum = 0;
  #count = 0;

  constructor(bounds: readonly number[]) {
    for (let i = 1; i < bounds.length; i++) {
      if (!(bounds[i] > bounds[i - 1])) throw new RangeError('histogram bounds must ascend');
    }
    this.bounds = bounds;
    this.#counts = new Array<number>(bounds.length + 1).fill(0);
  }

  observe(value: number): void {
    // Prometheus buckets are "less than or equal": value == bound lands in that bucket.
    let lo = 0;
    let hi = this.bounds.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (value <= this.bounds[mid]) hi = mid;
      else lo = mid + 1;
    }
    this.#counts[lo]++;
    this.#sum += value;
    this.#count++;
  }

  snapshot(): HistogramSnapshot {
    return { bounds: this.bounds, counts: [...this.#counts], sum: this.#sum, count: this.#count };
  }
}
