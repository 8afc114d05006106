// The agent's Prometheus metrics (prefix kinference_). One registry per agent, so several
// agents in one process (tests, the benchmark) don't share counters.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

const TTFT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20];

export interface PodPrediction {
  pod: string;
  where: 'local' | 'peer';
  seconds: number;
}

export interface MetricsOptions {
  defaultMetrics?: boolean;
  /** Read at scrape time: each known pod's predicted TTFT for a reference request. */
  podPredictions?: () => PodPrediction[];
  /** Read at scrape time: is discovery connected to its source now? */
  discoveryConnected?: () => boolean;
}

/** Each pod's prediction as the pool's state shows it: local pods by name, peers' as node/name. */
export function podPredictionsOf(state: {
  local: readonly { pod: { name: string }; predictedTtftMs?: number }[];
  remote: readonly { pod: { node: string; name: string }; predictedTtftMs?: number }[];
}): PodPrediction[] {
  return [
    ...state.local.map((p) => ({
      pod: p.pod.name,
      where: 'local' as const,
      seconds: (p.predictedTtftMs ?? NaN) / 1000,
    })),
    ...state.remote.map((p) => ({
      pod: `${p.pod.node}/${p.pod.name}`,
      where: 'peer' as const,
      seconds: (p.predictedTtftMs ?? NaN) / 1000,
    })),
  ];
}

export function createMetrics(options: MetricsOptions = {}) {
  const registry = new Registry();
  if (options.defaultMetrics) collectDefaultMetrics({ register: registry, prefix: 'kinference_' });
  const m = {
    registry,
    requests: new Counter({
      name: 'kinference_requests_total',
      help: 'Requests handled, by API, route taken (local|peer|overflow|rejected), outcome, model and policy (bounded: "other" past limits.maxLabelValues, "none" before either is known).',
      labelNames: ['api', 'route', 'outcome', 'model', 'policy'] as const,
      registers: [registry],
    }),
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
    overflows: new Counter({
      name: 'kinference_overflow_total',
      help: 'Requests answered by a provider, by provider and why no pod took them (over-slo|excluded|stale|unhealthy|no-pod|pods-failed|…).',
      labelNames: ['provider', 'reason'] as const,
      registers: [registry],
    }),
    sloRequests: new Counter({
      name: 'kinference_slo_requests_total',
      help: 'Answered requests whose TTFT could be measured (streamed, embeddings, overflow), by route, whether policy let them leave, and whether their TTFT (from arrival at the agent) met the SLO.',
      labelNames: ['route', 'leavable', 'within_slo'] as const,
      registers: [registry],
    }),
    admissionCalibration: new Counter({
      name: 'kinference_admission_calibration_total',
      help: "Requests served by a local pod whose TTFT could be measured, by whether it was within the predicted quantile (at the policy's attainment) they were admitted on; the within share should sit near that attainment.",
      labelNames: ['pod', 'within_quantile'] as const,
      registers: [registry],
    }),
    prefixTokens: new Counter({
      name: 'kinference_prefix_tokens_total',
      help: 'Estimated prompt tokens sent to pods (kind="prompt"), and of those expected in the pod\'s prefix cache (kind="expected_cached").',
      labelNames: ['kind'] as const,
      registers: [registry],
    }),
    retries: new Counter({
      name: 'kinference_retries_total',
      help: 'Requests retried on another pod after a failure before the first byte.',
      registers: [registry],
    }),
    waits: new Counter({
      name: 'kinference_waits_total',
      help: 'Requests that waited for a pod, by how the wait ended (pod|timeout|cancelled|full).',
      labelNames: ['outcome'] as const,
      registers: [registry],
    }),
    dropped: new Counter({
      name: 'kinference_candidates_dropped_total',
      help: 'Candidate pods dropped by a routing filter, by reason.',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
    providerRequests: new Counter({
      name: 'kinference_provider_requests_total',
      help: 'Overflow attempts per provider and outcome (ok|declined|failed|skipped|client_error).',
      labelNames: ['provider', 'outcome'] as const,
      registers: [registry],
    }),
    scrapes: new Counter({
      name: 'kinference_scrapes_total',
      help: 'Scrapes of local model servers, by outcome (ok|error|implausible).',
      labelNames: ['outcome'] as const,
      registers: [registry],
    }),
    podPredictedTtft: new Gauge({
      name: 'kinference_pod_predicted_ttft_seconds',
      help: 'Predicted TTFT of a 256-token prompt at each known pod, now.',
      labelNames: ['pod', 'where'] as const,
      registers: [registry],
      collect() {
        if (!options.podPredictions) return;
        this.reset(); // pods that left take their series with them
        for (const p of options.podPredictions()) this.set({ pod: p.pod, where: p.where }, p.seconds);
      },
    }),
    inFlight: new Gauge({
      name: 'kinference_in_flight_requests',
      help: 'Requests being served now.',
      registers: [registry],
    }),
    policyReloads: new Counter({
      name: 'kinference_policy_reloads_total',
      help: 'Policy (config) reloads, by outcome (ok|rejected).',
      labelNames: ['outcome'] as const,
      registers: [registry],
    }),
    // Data boundary (agent/classify, agent/server/identify.ts, peer validation).
    classified: new Counter({
      name: 'kinference_classified_total',
      help: 'Requests a detector tagged, by detector (email|card|ssn|iban|phone|<custom name>|unscanned) and the tag it added.',
      labelNames: ['detector', 'tag'] as const,
      registers: [registry],
    }),
    unidentified: new Counter({
      name: 'kinference_unidentified_callers_total',
      help: 'Requests whose caller namespace could not be established (treated as the most restricted tenant), by reason.',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
    peerPodsRejected: new Counter({
      name: 'kinference_peer_pods_rejected_total',
      help: 'Gossiped pods not routable: address or namespace the cluster does not confirm, or estimates out of bounds.',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
    policiesRejected: new Counter({
      name: 'kinference_policies_rejected_total',
      help: 'Policies kept out at load, by reason (invalid|guardrail).',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
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
