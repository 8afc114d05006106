// The request path's metrics: counters, histograms and a gauge that sum in place and hand their
// values to prom-client when the registry is read, so /metrics is prom-client's exposition.
import { Counter, Gauge, type Registry, type Metric } from '../../../shared/prom-client.ts';

/** One series of a hot metric: its labels (made once) and what was added since prom-client last read it. */
interface Cell<L extends string> {
  labels: Record<L, string>;
  delta: number;
}

/**
 * Series by label values, in labelNames' order, as nested maps: found with a Map lookup per label
 * (each value's hash is cached in the string), no label object, hashing or validation per call.
 */
class SeriesTable<L extends string, C> {
  readonly names: readonly L[];
  readonly #root = new Map<string | undefined, unknown>();
  readonly #make: (labels: Record<L, string>) => C;

  constructor(names: readonly L[], make: (labels: Record<L, string>) => C) {
    this.names = names;
    this.#make = make;
  }

  find(a: string, b?: string, c?: string, d?: string, e?: string): C {
    const n = this.names.length;
    let map = this.#root;
    if (n > 1) map = this.#next(map, a);
    if (n > 2) map = this.#next(map, b);
    if (n > 3) map = this.#next(map, c);
    if (n > 4) map = this.#next(map, d);
    const last = n === 1 ? a : n === 2 ? b : n === 3 ? c : n === 4 ? d : e;
    let found = map.get(last) as C | undefined;
    if (found === undefined) {
      const values = [a, b, c, d, e];
      const labels = {} as Record<L, string>;
      this.names.forEach((name, i) => (labels[name] = values[i] as string));
      found = this.#make(labels);
      map.set(last, found);
    }
    return found;
  }

  #next(map: Map<string | undefined, unknown>, key: string | undefined): Map<string | undefined, unknown> {
    let next = map.get(key) as Map<string | undefined, unknown> | undefined;
    if (next === undefined) {
      next = new Map();
      map.set(key, next);
    }
    return next;
  }
}

/**
 * A counter on the request path: increments are summed here per series and handed to prom-client
 * when the metric is read, so the exposition is prom-client's own. prom-client hashes and checks
 * the labels on every `inc` (0.35 µs with 5 labels, `labels()` children the same), which the
 * request path paid several times per request.
 */
export class HotCounter<L extends string> {
  readonly counter: Counter<L>;
  readonly #series: SeriesTable<L, Cell<L>>;
  /** Series with a count not yet handed over. */
  readonly #dirty: Cell<L>[] = [];

  constructor(registry: Registry, name: string, help: string, labelNames: readonly L[]) {
    this.#series = new SeriesTable(labelNames, (labels) => ({ labels, delta: 0 }));
    const flush = () => this.#flush();
    this.counter = new Counter<L>({
      name,
      help,
      labelNames,
      registers: [registry],
      collect() {
        flush();
      },
    });
  }

  /** Adds `value` to the series with these label values, in labelNames' order. */
  add(value: number, a: string, b?: string, c?: string, d?: string, e?: string): void {
    const cell = this.#series.find(a, b, c, d, e);
    if (cell.delta === 0) this.#dirty.push(cell);
    cell.delta += value;
  }

  /** prom-client's way (labels by name); the request path calls `add`. */
  inc(labels: Record<L, string>, value = 1): void {
    const v = this.#series.names.map((name) => labels[name]);
    this.add(value, v[0], v[1], v[2], v[3], v[4]);
  }

  /** The counter's series, as prom-client reads them (counts so far included). */
  get(): ReturnType<Counter<L>['get']> {
    return this.counter.get();
  }

  #flush(): void {
    for (const cell of this.#dirty) {
      if (cell.delta > 0) this.counter.inc(cell.labels, cell.delta);
      cell.delta = 0;
    }
    this.#dirty.length = 0;
  }
}

/** A histogram as prom-client's registry reads it: each line's name, labels (bucket ones apart) and value. */
interface HistogramExport {
  name: string;
  help: string;
  type: 'histogram';
  values: {
    metricName: string;
    labels: Record<string, string | number>;
    sharedLabels?: Record<string, string>;
    value: number;
    /** prom-client's shape: null on buckets, undefined on sum and count (no exemplars here). */
    exemplar: null | undefined;
  }[];
  aggregator: 'sum';
}

interface HistogramSeries<L extends string> {
  labels: Record<L, string>;
  /** Observations per bucket (not cumulative); the last one is above every bound. */
  buckets: number[];
  sum: number;
  count: number;
}

/**
 * A histogram on the request path, exported exactly as prom-client's Histogram is (it is read by
 * the registry like one), without prom-client's per-observation label hashing and closure.
 */
export class HotHistogram<L extends string> {
  readonly name: string;
  readonly help: string;
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly #bounds: readonly number[];
  readonly #series: SeriesTable<L, HistogramSeries<L>>;
  readonly #all: HistogramSeries<L>[] = [];

  constructor(registry: Registry, name: string, help: string, labelNames: readonly L[], bounds: readonly number[]) {
    this.name = name;
    this.help = help;
    this.#bounds = bounds;
    this.#series = new SeriesTable(labelNames, (labels) => {
      const series = { labels, buckets: new Array<number>(bounds.length + 1).fill(0), sum: 0, count: 0 };
      this.#all.push(series);
      return series;
    });
    registry.registerMetric(this as unknown as Metric);
  }

  /** Records `value` in the series with these label values, in labelNames' order. */
  observe(value: number, a: string, b?: string): void {
    if (!Number.isFinite(value)) return;
    const series = this.#series.find(a, b);
    const bounds = this.#bounds;
    let i = 0;
    while (i < bounds.length && value > bounds[i]) i++;
    series.buckets[i]++;
    series.sum += value;
    series.count++;
  }

  /** As prom-client's Histogram gives them to the registry: bucket labels apart from the series' own. */
  async getForPromString(): Promise<HistogramExport> {
    const values: HistogramExport['values'] = [];
    for (const s of this.#all) {
      let cumulative = 0;
      const bucket = `${this.name}_bucket`;
      this.#bounds.forEach((le, i) => {
        cumulative += s.buckets[i];
        values.push({ labels: { le }, sharedLabels: s.labels, value: cumulative, metricName: bucket, exemplar: null });
      });
      const shared = s.labels;
      values.push({ labels: { le: '+Inf' }, sharedLabels: shared, value: s.count, metricName: bucket, exemplar: null });
      values.push({
        labels: {},
        sharedLabels: shared,
        value: s.sum,
        metricName: `${this.name}_sum`,
        exemplar: undefined,
      });
      values.push({
        labels: {},
        sharedLabels: shared,
        value: s.count,
        metricName: `${this.name}_count`,
        exemplar: undefined,
      });
    }
    return { name: this.name, help: this.help, type: 'histogram', values, aggregator: 'sum' };
  }

  /** As prom-client's Histogram `get()`: each value's labels whole. */
  async get(): Promise<HistogramExport> {
    const data = await this.getForPromString();
    data.values = data.values.map(({ sharedLabels, ...v }) => ({ ...v, labels: { ...v.labels, ...sharedLabels } }));
    return data;
  }

  reset(): void {
    for (const s of this.#all) {
      s.buckets.fill(0);
      s.sum = 0;
      s.count = 0;
    }
  }
}

/** A gauge the request path moves by one: a plain number, read into prom-client when the metric is read. */
export class HotGauge {
  value = 0;
  constructor(registry: Registry, name: string, help: string) {
    const read = () => this.value;
    new Gauge({
      name,
      help,
      registers: [registry],
      collect() {
        this.set(read());
      },
    });
  }
  inc(): void {
    this.value++;
  }
  dec(): void {
    this.value--;
  }
}
