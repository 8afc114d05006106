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

export function createMetrics(options: MetricsOptions = {}) {
  const registry = new Registry();
  if (options.defaultMetrics) collectDefaultMetrics({ register: registry, prefix: 'kinference_' });
  const m = {
    registry,
    requests: new Counter({
      name: 'kinference_requests_total',
      help: 'Requests handled, by API, route taken (local|peer|overflow|rejected) and outcome.',
      labelNames: ['api', 'route', 'outcome'] as const,
      registers: [registry],
    }),
    upstreamTtft: new Histogram({
      name: 'kinference_upstream_ttft_seconds',
      help: 'Time from sending a streamed request upstream to its first byte, by route.',
      labelNames: ['route'] as const,
      buckets: TTFT_BUCKETS,
      registers: [registry],
    }),
    predictionError: new Histogram({
      name: 'kinference_prediction_error_ratio',
      help: 'Absolute relative error of the predicted TTFT against the measured one (local pods).',
      buckets: [0.02, 0.05, 0.1, 0.2, 0.5, 1, 2],
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
