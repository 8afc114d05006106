// The agent's Prometheus metrics (prefix kinference_). One registry per agent, so several
// agents in one process (tests, the benchmark) don't share counters.
import { Counter, Gauge, Registry, collectDefaultMetrics, type Metric } from '../../shared/prom-client.ts';

const TTFT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20];

export interface PodPrediction {
  pod: string;
  seconds: number;
}

/** Predictions for /metrics: one series per local pod, one per peer node (its fastest pod). */
export interface PodPredictions {
  local: PodPrediction[];
  peerNodes: { node: string; seconds: number }[];
}

export interface MetricsOptions {
  defaultMetrics?: boolean;
  /** Read at scrape time: each local pod's and each peer node's predicted TTFT for a reference request. */
  podPredictions?: () => PodPredictions;
  /** Read at scrape time: is discovery connected to its source now? */
  discoveryConnected?: () => boolean;
  /** Read at scrape time: requests waiting for a pod, by priority class and by tenant (bounded). */
  waiting?: () => { byPriority: Record<string, number>; byTenant: ReadonlyMap<string, number> };
  /** Read at scrape time: each budgeted tenant's usage and remaining budget per limit. */
  budgetUsage?: () => { tenant: string; states: BudgetLimitState[] }[];
  /** Read at scrape time: the budget ledger's counters and origins held, what it dropped, whether it heard the cluster. */
  budgetLedger?: () => { counters: number; origins: number; dropped: number; synced: boolean };
  /** Most tenant label values on the waiting gauge; the rest add up under `other`. */
  maxTenantLabels?: number;
  /** Read at scrape time: local pods by routing state (fresh, stale: no recent scrape, unhealthy). */
  localPodStates?: () => Record<'fresh' | 'stale' | 'unhealthy', number>;
  /** Read at scrape time: each provider's circuit breaker state. */
  providerBreakers?: () => { provider: string; state: 'closed' | 'open' | 'half-open' }[];
}

/** One budget limit's state as the budget gauges read it (remaining: only units the limit bounds). */
interface BudgetLimitState {
  scope: string;
  usedTokens: number;
  usedRequests: number;
  remainingTokens?: number;
  remainingRequests?: number;
}

/**
 * The pool's predictions as /metrics exports them: local pods by name; peers' pods folded into
 * their node (its fastest pod), and only the `maxNodes` fastest nodes, so the page's size does
 * not grow with the cluster.
 */
export function podPredictionsOf(
  state: {
    local: readonly { pod: { name: string }; predictedTtftMs?: number }[];
    remote: readonly { pod: { node: string }; predictedTtftMs?: number }[];
  },
  maxNodes: number,
): PodPredictions {
  const fastest = new Map<string, number>();
  for (const p of state.remote) {
    const ms = p.predictedTtftMs ?? NaN;
    const best = fastest.get(p.pod.node);
    if (best === undefined || ms < best || Number.isNaN(best)) fastest.set(p.pod.node, ms);
  }
  const known = (s: number) => (Number.isNaN(s) ? Infinity : s);
  const peerNodes = [...fastest]
    .map(([node, ms]) => ({ node, seconds: ms / 1000 }))
    .sort((a, b) => known(a.seconds) - known(b.seconds))
    .slice(0, maxNodes);
  return {
    local: state.local.map((p) => ({ pod: p.pod.name, seconds: (p.predictedTtftMs ?? NaN) / 1000 })),
    peerNodes,
  };
}

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

export function createMetrics(options: MetricsOptions = {}) {
  const registry = new Registry();
  if (options.defaultMetrics) collectDefaultMetrics({ register: registry, prefix: 'kinference_' });
  // Read by the pod gauge's collect, written out by the peer-node gauge's (registered after it):
  // one read of the pool per scrape for both.
  let peerNodes: PodPredictions['peerNodes'] = [];
  /** A plain counter on this agent's registry (most metrics here are just that). */
  const counter = <L extends string>(name: string, help: string, labelNames: readonly L[] = []) =>
    new Counter<L>({ name, help, labelNames, registers: [registry] });
  /** A request-path counter on this agent's registry (see HotCounter). */
  const hotCounter = <L extends string>(name: string, help: string, labelNames: readonly L[]) =>
    new HotCounter<L>(registry, name, help, labelNames);
  /** A request-path histogram on this agent's registry (see HotHistogram). */
  const hotHistogram = <L extends string>(name: string, help: string, labelNames: readonly L[], buckets: number[]) =>
    new HotHistogram<L>(registry, name, help, labelNames, buckets);
  /** A gauge on this agent's registry; `collect` (if any) refreshes it when /metrics is read. */
  const gauge = <L extends string>(
    name: string,
    help: string,
    labelNames: readonly L[],
    collect?: (gauge: Gauge<L>) => void,
  ) =>
    new Gauge<L>({
      name,
      help,
      labelNames,
      registers: [registry],
      ...(collect && {
        collect() {
          collect(this);
        },
      }),
    });
  /** A gauge of every budgeted tenant's limits: `pick` gives [tokens, requests]; undefined is not exported. */
  const budgetGauge = (
    name: string,
    help: string,
    pick: (state: BudgetLimitState) => [number | undefined, number | undefined],
  ) =>
    gauge(name, help, ['tenant', 'window', 'unit'], (g) => {
      if (!options.budgetUsage) return;
      g.reset();
      for (const { tenant, states } of options.budgetUsage())
        for (const state of states) {
          const [tokens, requests] = pick(state);
          if (tokens !== undefined) g.set({ tenant, window: state.scope, unit: 'tokens' }, tokens);
          if (requests !== undefined) g.set({ tenant, window: state.scope, unit: 'requests' }, requests);
        }
    });
  const m = {
    registry,
    requests: hotCounter(
      'kinference_requests_total',
      'Requests handled, by API, route taken (local|peer|overflow|rejected), outcome, model and policy (bounded: "other" past limits.maxLabelValues, "none" before either is known).',
      ['api', 'route', 'outcome', 'model', 'policy'],
    ),
    upstreamTtft: hotHistogram(
      'kinference_upstream_ttft_seconds',
      'Time from sending a request upstream to its first byte, by route (local|peer|overflow) and stream (true: the first token; false: the whole answer, which arrives at once).',
      ['route', 'stream'],
      TTFT_BUCKETS,
    ),
    predictionError: hotHistogram(
      'kinference_prediction_error_ratio',
      'Absolute relative error of the predicted TTFT against the measured first byte (local pods), by stream (false: first byte = whole answer, so it includes generation).',
      ['stream'],
      [0.02, 0.05, 0.1, 0.2, 0.5, 1, 2],
    ),
    podTtft: hotHistogram(
      'kinference_pod_ttft_seconds',
      'TTFT of streamed requests per local pod: source="measured" (first byte) and source="predicted" (what the router predicted for the same requests).',
      ['pod', 'source'],
      TTFT_BUCKETS,
    ),
    overflows: counter(
      'kinference_overflow_total',
      'Requests answered by a provider, by provider and why no pod took them (over-slo|excluded|stale|unhealthy|no-pod|pods-failed|…).',
      ['provider', 'reason'],
    ),
    budgetRefusals: counter(
      'kinference_overflow_budget_refusals_total',
      "Requests answered 429 because their tenant's overflow budget kept them in the cluster and no pod freed in time, by tenant (bounded) and reason (exhausted|share|warming).",
      ['tenant', 'reason'],
    ),
    sloRequests: hotCounter(
      'kinference_slo_requests_total',
      'Answered requests whose TTFT could be measured (streamed, embeddings, overflow), by route, whether policy let them leave, and whether their TTFT (from arrival at the agent) met the SLO.',
      ['route', 'leavable', 'within_slo'],
    ),
    admissionCalibration: hotCounter(
      'kinference_admission_calibration_total',
      "Requests served by a local pod whose TTFT could be measured, by whether it was within the predicted quantile (at the policy's attainment) they were admitted on; the within share should sit near that attainment.",
      ['pod', 'within_quantile'],
    ),
    prefixTokens: hotCounter(
      'kinference_prefix_tokens_total',
      'Estimated prompt tokens sent to pods (kind="prompt"), and of those expected in the pod\'s prefix cache (kind="expected_cached").',
      ['kind'],
    ),
    retries: counter(
      'kinference_retries_total',
      'Requests retried on another pod after a failure before the first byte.',
    ),
    waits: counter(
      'kinference_waits_total',
      'Requests that waited for a pod, by how the wait ended (pod|timeout|cancelled|full|shed: a higher priority took its place).',
      ['outcome'],
    ),
    dropped: hotCounter(
      'kinference_candidates_dropped_total',
      'Candidate pods dropped by a routing filter, by reason.',
      ['reason'],
    ),
    providerRequests: counter(
      'kinference_provider_requests_total',
      'Overflow attempts per provider and outcome (ok|declined|failed|skipped|client_error).',
      ['provider', 'outcome'],
    ),
    scrapes: counter('kinference_scrapes_total', 'Scrapes of local model servers, by outcome (ok|error|implausible).', [
      'outcome',
    ]),
    podPredictedTtft: gauge(
      'kinference_pod_predicted_ttft_seconds',
      'Predicted TTFT of a 256-token prompt at each local pod, now (peers: kinference_peer_node_predicted_ttft_seconds).',
      ['pod', 'where'],
      (g) => {
        if (!options.podPredictions) return;
        const predictions = options.podPredictions();
        g.reset(); // pods that left take their series with them
        for (const p of predictions.local) g.set({ pod: p.pod, where: 'local' }, p.seconds);
        peerNodes = predictions.peerNodes;
      },
    ),
    peerNodePredictedTtft: gauge(
      'kinference_peer_node_predicted_ttft_seconds',
      "Predicted TTFT of a 256-token prompt at each peer node's fastest pod, now; the fastest nodes only (limits.maxLabelValues).",
      ['node'],
      (g) => {
        g.reset();
        for (const n of peerNodes) g.set({ node: n.node }, n.seconds);
      },
    ),
    waitingRequests: gauge(
      'kinference_waiting_requests',
      'Requests waiting for a pod now, by priority class (critical|standard|sheddable).',
      ['priority'],
      (g) => {
        if (!options.waiting) return;
        for (const [priority, n] of Object.entries(options.waiting().byPriority)) g.set({ priority }, n);
      },
    ),
    waitingByTenant: gauge(
      'kinference_waiting_requests_by_tenant',
      'Requests waiting for a pod now, by tenant (the most waiting first; past the label bound: other).',
      ['tenant'],
      (g) => {
        if (!options.waiting) return;
        g.reset(); // tenants no longer waiting take their series with them
        const sorted = [...options.waiting().byTenant].sort((a, b) => b[1] - a[1]);
        const bound = options.maxTenantLabels ?? 100;
        for (const [tenant, n] of sorted.slice(0, bound)) g.set({ tenant }, n);
        const rest = sorted.slice(bound).reduce((sum, [, n]) => sum + n, 0);
        if (rest > 0) g.set({ tenant: 'other' }, rest);
      },
    ),
    budgetUsed: budgetGauge(
      'kinference_overflow_budget_used',
      "Overflow a tenant used in the current window of each of its budget's limits (window: minute|hour|day, /provider when scoped), cluster-wide as this agent sees it, by unit (tokens|requests). Tenants bounded by limits.maxLabelValues.",
      (s) => [s.usedTokens, s.usedRequests],
    ),
    budgetRemaining: budgetGauge(
      'kinference_overflow_budget_remaining',
      "What is left of a tenant's overflow budget in the current window, per limit and unit (only units the limit bounds).",
      (s) => [s.remainingTokens, s.remainingRequests],
    ),
    budgetHeld: gauge(
      'kinference_budget_counters',
      'Overflow budget counters this agent holds (every origin of the cluster, current windows), by kind (counters|origins).',
      ['kind'],
      (g) => {
        const ledger = options.budgetLedger?.();
        if (!ledger) return;
        g.set({ kind: 'counters' }, ledger.counters);
        g.set({ kind: 'origins' }, ledger.origins);
      },
    ),
    budgetDropped: new Counter({
      name: 'kinference_budget_dropped_total',
      help: 'Overflow budget counters dropped: a bound (limits) reached, or malformed from a peer.',
      registers: [registry],
      collect() {
        const ledger = options.budgetLedger?.();
        if (!ledger) return;
        this.reset();
        this.inc(ledger.dropped);
      },
    }),
    budgetSynced: gauge(
      'kinference_budget_synced',
      'Whether this agent has heard what the cluster spent (1), or still admits only a conservative share of budgets (0).',
      [],
      (g) => {
        const ledger = options.budgetLedger?.();
        if (ledger) g.set(ledger.synced ? 1 : 0);
      },
    ),
    inFlight: new HotGauge(registry, 'kinference_in_flight_requests', 'Requests being served now.'),
    memoryReleases: counter(
      'kinference_memory_releases_total',
      'Memory-reducing GCs the agent ran after turning quiet (limits.releaseMemoryAfterIdle).',
    ),
    policyReloads: counter('kinference_policy_reloads_total', 'Policy (config) reloads, by outcome (ok|rejected).', [
      'outcome',
    ]),
    // Data boundary (agent/classify, agent/server/identify.ts, peer validation).
    classified: counter(
      'kinference_classified_total',
      'Requests a detector tagged, by detector (email|card|ssn|iban|phone|<custom name>|unscanned) and the tag it added.',
      ['detector', 'tag'],
    ),
    unidentified: counter(
      'kinference_unidentified_callers_total',
      'Requests whose caller namespace could not be established (treated as the most restricted tenant), by reason.',
      ['reason'],
    ),
    peerPodsRejected: counter(
      'kinference_peer_pods_rejected_total',
      'Gossiped pods not routable: address or namespace the cluster does not confirm, or estimates out of bounds.',
      ['reason'],
    ),
    policiesRejected: counter(
      'kinference_policies_rejected_total',
      'Policies kept out at load, by reason (invalid|guardrail).',
      ['reason'],
    ),
    localPods: gauge(
      'kinference_local_pods',
      'Local model-server pods by routing state: fresh, stale (no good scrape within its limit: not a candidate), unhealthy.',
      ['state'],
      (g) => {
        if (!options.localPodStates) return;
        for (const [state, n] of Object.entries(options.localPodStates())) g.set({ state }, n);
      },
    ),
    providerBreakerOpen: gauge(
      'kinference_provider_breaker_open',
      "1 while a provider's circuit breaker is open or half-open (requests skip it), else 0.",
      ['provider'],
      (g) => {
        if (!options.providerBreakers) return;
        g.reset(); // providers removed from the config take their series with them
        for (const b of options.providerBreakers()) g.set({ provider: b.provider }, b.state === 'closed' ? 0 : 1);
      },
    ),
    discoveryConnected: gauge(
      'kinference_discovery_connected',
      '1 while discovery is connected to its source (Kubernetes API); 0 while serving the last known view.',
      [],
      (g) => {
        if (options.discoveryConnected) g.set(options.discoveryConnected() ? 1 : 0);
      },
    ),
  };
  return m;
}

export type Metrics = ReturnType<typeof createMetrics>;

/**
 * Keeps a label's values bounded: the first `max` distinct values pass, later ones read "other".
 * Models and policies come from configuration, but a config reload or a cluster full of
 * namespaces must not grow a time series per value without end.
 */
export class BoundedLabel {
  readonly #seen = new Set<string>();
  readonly #max: number;
  constructor(max: number) {
    this.#max = max;
  }
  value(v: string): string {
    if (this.#seen.has(v)) return v;
    if (this.#seen.size >= this.#max) return 'other';
    this.#seen.add(v);
    return v;
  }
}
