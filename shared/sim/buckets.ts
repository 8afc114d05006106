// Histogram bucket bounds (seconds) exactly as each model server declares them, so a scraper
// tested against the simulator sees the same `le` labels it will see in production.

export type Flavor = 'vllm' | 'tgi' | 'sglang';

/** The request latencies the engine records; each flavor renders the subset it has. */
export type LatencyHistogram =
  | 'ttft' // arrival → first token
  | 'itl' // between two consecutive tokens of one request
  | 'e2e' // arrival → last token
  | 'queue' // arrival → first scheduled
  | 'prefill' // first scheduled → first token
  | 'decode' // first token → last token
  | 'inference' // first scheduled → last token
  | 'tpot'; // per request: decode time / (output tokens - 1)

export type BucketLayout = Record<LatencyHistogram, readonly number[]>;

// vllm/v1/metrics/loggers.py (PrometheusStatLogger)
const VLLM_TTFT = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0,
  640.0, 2560.0,
];
const VLLM_ITL = [
  0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
];
const VLLM_REQUEST_LATENCY = [
  0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0,
  7680.0,
];

// text-generation-inference router/src/server.rs: every metric ending in "duration" gets 35
// geometric buckets, 0.0001 · 1.5^k for k = 1..35, computed by repeated multiplication.
const TGI_DURATION = (() => {
  const out: number[] = [];
  let value = 0.0001;
  for (let i = 0; i < 35; i++) {
    value *= 1.5;
    out.push(value);
  }
  return out;
})();

// sglang/srt/metrics/collector.py (TokenizerMetricsCollector, SchedulerMetricsCollector)
const SGLANG_TTFT = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400];
const SGLANG_E2E = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400];
const SGLANG_ITL = [
  0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4,
  6, 8,
];
const SGLANG_QUEUE = [
  0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400, 500, 600, 700, 800,
  900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000,
];

export const BUCKETS: Record<Flavor, BucketLayout> = {
  vllm: {
    ttft: VLLM_TTFT,
    itl: VLLM_ITL,
    tpot: VLLM_ITL,
    e2e: VLLM_REQUEST_LATENCY,
    queue: VLLM_REQUEST_LATENCY,
    prefill: VLLM_REQUEST_LATENCY,
    decode: VLLM_REQUEST_LATENCY,
    inference: VLLM_REQUEST_LATENCY,
  },
  tgi: {
    ttft: TGI_DURATION,
    itl: TGI_DURATION,
    tpot: TGI_DURATION,
    e2e: TGI_DURATION,
    queue: TGI_DURATION,
    prefill: TGI_DURATION,
    decode: TGI_DURATION,
    inference: TGI_DURATION,
  },
  sglang: {
    ttft: SGLANG_TTFT,
    itl: SGLANG_ITL,
    tpot: SGLANG_ITL,
    e2e: SGLANG_E2E,
    queue: SGLANG_QUEUE,
    prefill: SGLANG_E2E,
    decode: SGLANG_E2E,
    inference: SGLANG_E2E,
  },
};
