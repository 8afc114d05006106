// The agent's Prometheus metrics (prefix kinference_). One registry per agent, so several
// agents in one process (tests, the benchmark) don't share counters.
import { Counter, Gauge, Registry, collectDefaultMetrics } from '../../../shared/prom-client.ts';
import { HotCounter, HotGauge, HotHistogram } from './hot-metrics.ts';

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

/** Builders of the agent's metric kinds, each registering on the one registry. */
function metricKinds(registry: Registry, options: MetricsOptions) {
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
  return { counter, hotCounter, hotHistogram, gauge, budgetGauge };
}

type MetricKinds = ReturnType<typeof metricKinds>;

export function createMetrics(options: MetricsOptions = {}) {
  const registry = new Registry();
  if (options.defaultMetrics) collectDefaultMetrics({ register: registry, prefix: 'kinference_' });
  const kinds = metricKinds(registry, options);
  // Registered in this order, which is the order of /metrics.
  return {
    registry,
    ...requestMetrics(kinds),
    ...scrapeTimeGauges(kinds, options),
    ...budgetMetrics(kinds, options, registry),
    ...agentMetrics(kinds, options, registry),
  };
}

/** What the request path counts and times: requests, TTFTs, overflows, retries, waits. */
function requestMetrics({ counter, hotCounter, hotHistogram }: MetricKinds) {
  return {
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
  };
}

/** Gauges of the pool and the waiting line, read when /metrics is. */
function scrapeTimeGauges({ gauge }: MetricKinds, options: MetricsOptions) {
  // Read by the pod gauge's collect, written out by the peer-node gauge's (registered after it):
  // one read of the pool per scrape for both.
  let peerNodes: PodPredictions['peerNodes'] = [];
  return {
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
  };
}

/** The overflow budgets: each tenant's usage and remaining, and the ledger's state. */
function budgetMetrics({ gauge, budgetGauge }: MetricKinds, options: MetricsOptions, registry: Registry) {
  return {
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
  };
}

/** The agent as a whole: in-flight requests, reloads, the data boundary, pods, providers, discovery. */
function agentMetrics({ counter, gauge }: MetricKinds, options: MetricsOptions, registry: Registry) {
  return {
    inFlight: new HotGauge(registry, 'kinference_in_flight_requests', 'Requests being served now.'),
    memoryReleases: counter(
      'kinference_memory_releases_total',
      'Memory-reducing GCs the agent ran after turning quiet (limits.releaseMemoryAfterIdle).',
    ),
    policyReloads: counter('kinference_policy_reloads_total', 'Policy (config) reloads, by outcome (ok|rejected).', [
      'outcome',
    ]),
    // Data boundary (agent/classify, agent/server/request-path/identify.ts, peer validation).
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
