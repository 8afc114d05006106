// The agent's Prometheus metrics (prefix kinference_). One registry per agent, so several
// agents in one process (tests, the benchmark) don't share counters.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

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
  budgetUsage?: () => {
    tenant: string;
    states: {
      scope: string;
      usedTokens: number;
      usedRequests: number;
      remainingTokens?: number;
      remainingRequests?: number;
    }[];
  }[];
  /** Read at scrape time: the budget ledger's counters and origins held, what it dropped, whether it heard the cluster. */
  budgetLedger?: () => { counters: number; origins: number; dropped: number; synced: boolean };
  /** Most tenant label values on the waiting gauge; the rest add up under `other`. */
  maxTenantLabels?: number;
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

export function createMetrics(options: MetricsOptions = {}) {
  const registry = new Registry();
  if (options.defaultMetrics) collectDefaultMetrics({ register: registry, prefix: 'kinference_' });
  // Read by the pod gauge's collect, written out by the peer-node gauge's (registered after it):
  // one read of the pool per scrape for both.
  let peerNodes: PodPredictions['peerNodes'] = [];
  /** A plain counter on this agent's registry (most metrics here are just that). */
  const counter = <L extends string>(name: string, help: string, labelNames: readonly L[] = []) =>
    new Counter<L>({ name, help, labelNames, registers: [registry] });
  const m = {
    registry,
    requests: counter(
      'kinference_requests_total',
      'Requests handled, by API, route taken (local|peer|overflow|rejected), outcome, model and policy (bounded: "other" past limits.maxLabelValues, "none" before either is known).',
      ['api', 'route', 'outcome', 'model', 'policy'],
    ),
    upstreamTtft: new Histogram({
      name: 'kinference_upstream_ttft_seconds',
      help: 'Time from sending a request upstream to its first byte, by route (local|peer|overflow) and stream (true: the first token; false: the whole answer, which arrives at once).',
      labelNames: ['route', 'stream'] as const,
      buckets: TTFT_BUCKETS,
      registers: [registry],
    }),
    predictionError: new Histogram({
      name: 'kinference_prediction_error_ratio',
      help: 'Absolute relative error of the predicted TTFT against the measured first byte (local pods), by stream (false: first byte = whole answer, so it includes generation).',
      labelNames: ['stream'] as const,
      buckets: [0.02, 0.05, 0.1, 0.2, 0.5, 1, 2],
      registers: [registry],
    }),
    podTtft: new Histogram({
      name: 'kinference_pod_ttft_seconds',
      help: 'TTFT of streamed requests per local pod: source="measured" (first byte) and source="predicted" (what the router predicted for the same requests).',
      labelNames: ['pod', 'source'] as const,
      buckets: TTFT_BUCKETS,
      registers: [registry],
    }),
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
    sloRequests: counter(
      'kinference_slo_requests_total',
      'Answered requests whose TTFT could be measured (streamed, embeddings, overflow), by route, whether policy let them leave, and whether their TTFT (from arrival at the agent) met the SLO.',
      ['route', 'leavable', 'within_slo'],
    ),
    admissionCalibration: counter(
      'kinference_admission_calibration_total',
      "Requests served by a local pod whose TTFT could be measured, by whether it was within the predicted quantile (at the policy's attainment) they were admitted on; the within share should sit near that attainment.",
      ['pod', 'within_quantile'],
    ),
    prefixTokens: new Counter({
      name: 'kinference_prefix_tokens_total',
      help: 'Estimated prompt tokens sent to pods (kind="prompt"), and of those expected in the pod\'s prefix cache (kind="expected_cached").',
      labelNames: ['kind'] as const,
      registers: [registry],
    }),
    retries: counter(
      'kinference_retries_total',
      'Requests retried on another pod after a failure before the first byte.',
    ),
    waits: counter(
      'kinference_waits_total',
      'Requests that waited for a pod, by how the wait ended (pod|timeout|cancelled|full|shed: a higher priority took its place).',
      ['outcome'],
    ),
    dropped: counter('kinference_candidates_dropped_total', 'Candidate pods dropped by a routing filter, by reason.', [
      'reason',
    ]),
    providerRequests: counter(
      'kinference_provider_requests_total',
      'Overflow attempts per provider and outcome (ok|declined|failed|skipped|client_error).',
      ['provider', 'outcome'],
    ),
    scrapes: counter('kinference_scrapes_total', 'Scrapes of local model servers, by outcome (ok|error|implausible).', [
      'outcome',
    ]),
    podPredictedTtft: new Gauge({
      name: 'kinference_pod_predicted_ttft_seconds',
      help: 'Predicted TTFT of a 256-token prompt at each local pod, now (peers: kinference_peer_node_predicted_ttft_seconds).',
      labelNames: ['pod', 'where'] as const,
      registers: [registry],
      collect() {
        if (!options.podPredictions) return;
        const predictions = options.podPredictions();
        this.reset(); // pods that left take their series with them
        for (const p of predictions.local) this.set({ pod: p.pod, where: 'local' }, p.seconds);
        peerNodes = predictions.peerNodes;
      },
    }),
    peerNodePredictedTtft: new Gauge({
      name: 'kinference_peer_node_predicted_ttft_seconds',
      help: "Predicted TTFT of a 256-token prompt at each peer node's fastest pod, now; the fastest nodes only (limits.maxLabelValues).",
      labelNames: ['node'] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const n of peerNodes) this.set({ node: n.node }, n.seconds);
      },
    }),
    waitingRequests: new Gauge({
      name: 'kinference_waiting_requests',
      help: 'Requests waiting for a pod now, by priority class (critical|standard|sheddable).',
      labelNames: ['priority'] as const,
      registers: [registry],
      collect() {
        if (!options.waiting) return;
        for (const [priority, n] of Object.entries(options.waiting().byPriority)) this.set({ priority }, n);
      },
    }),
    waitingByTenant: new Gauge({
      name: 'kinference_waiting_requests_by_tenant',
      help: 'Requests waiting for a pod now, by tenant (the most waiting first; past the label bound: other).',
      labelNames: ['tenant'] as const,
      registers: [registry],
      collect() {
        if (!options.waiting) return;
        this.reset(); // tenants no longer waiting take their series with them
        const sorted = [...options.waiting().byTenant].sort((a, b) => b[1] - a[1]);
        const bound = options.maxTenantLabels ?? 100;
        for (const [tenant, n] of sorted.slice(0, bound)) this.set({ tenant }, n);
        const rest = sorted.slice(bound).reduce((sum, [, n]) => sum + n, 0);
        if (rest > 0) this.set({ tenant: 'other' }, rest);
      },
    }),
    budgetUsed: new Gauge({
      name: 'kinference_overflow_budget_used',
      help: "Overflow a tenant used in the current window of each of its budget's limits (window: minute|hour|day, /provider when scoped), cluster-wide as this agent sees it, by unit (tokens|requests). Tenants bounded by limits.maxLabelValues.",
      labelNames: ['tenant', 'window', 'unit'] as const,
      registers: [registry],
      collect() {
        if (!options.budgetUsage) return;
        this.reset();
        for (const { tenant, states } of options.budgetUsage())
          for (const s of states) {
            this.set({ tenant, window: s.scope, unit: 'tokens' }, s.usedTokens);
            this.set({ tenant, window: s.scope, unit: 'requests' }, s.usedRequests);
          }
      },
    }),
    budgetRemaining: new Gauge({
      name: 'kinference_overflow_budget_remaining',
      help: "What is left of a tenant's overflow budget in the current window, per limit and unit (only units the limit bounds).",
      labelNames: ['tenant', 'window', 'unit'] as const,
      registers: [registry],
      collect() {
        if (!options.budgetUsage) return;
        this.reset();
        for (const { tenant, states } of options.budgetUsage())
          for (const s of states) {
            if (s.remainingTokens !== undefined)
              this.set({ tenant, window: s.scope, unit: 'tokens' }, s.remainingTokens);
            if (s.remainingRequests !== undefined)
              this.set({ tenant, window: s.scope, unit: 'requests' }, s.remainingRequests);
          }
      },
    }),
    budgetHeld: new Gauge({
      name: 'kinference_budget_counters',
      help: 'Overflow budget counters this agent holds (every origin of the cluster, current windows), by kind (counters|origins).',
      labelNames: ['kind'] as const,
      registers: [registry],
      collect() {
        const ledger = options.budgetLedger?.();
        if (!ledger) return;
        this.set({ kind: 'counters' }, ledger.counters);
        this.set({ kind: 'origins' }, ledger.origins);
      },
    }),
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
    budgetSynced: new Gauge({
      name: 'kinference_budget_synced',
      help: 'Whether this agent has heard what the cluster spent (1), or still admits only a conservative share of budgets (0).',
      registers: [registry],
      collect() {
        const ledger = options.budgetLedger?.();
        if (ledger) this.set(ledger.synced ? 1 : 0);
      },
    }),
    inFlight: new Gauge({
      name: 'kinference_in_flight_requests',
      help: 'Requests being served now.',
      registers: [registry],
    }),
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
    discoveryConnected: new Gauge({
      name: 'kinference_discovery_connected',
      help: '1 while discovery is connected to its source (Kubernetes API); 0 while serving the last known view.',
      registers: [registry],
      collect() {
        if (options.discoveryConnected) this.set(options.discoveryConnected() ? 1 : 0);
      },
    }),
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
