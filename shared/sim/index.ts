// The model-server simulator: an engine (pure, real or virtual time), its HTTP server, /metrics.

export { startSim, type SimFault, type SimOptions, type SimServer } from './server.ts';
export {
  SimEngine,
  type EngineCounters,
  type EngineSnapshot,
  type FinishReason,
  type SeqEvents,
  type SeqHandle,
  type SeqKind,
  type SeqOutcome,
  type SimEngineOptions,
  type SimRequest,
  type SubmitResult,
} from './engine.ts';
export { RealtimeDriver } from './driver.ts';
export { VirtualClock, realClock, type SimClock } from './clock.ts';
export { DEFAULT_LATENCY, stepCostMs, stepDurationMs, type LatencyParams, type StepWork } from './latency.ts';
export { BUCKETS, type BucketLayout, type Flavor, type LatencyHistogram } from './buckets.ts';
export { renderMetrics, metricsContentType, type MetricsContext } from './metrics.ts';
export type { HistogramSnapshot } from './histogram.ts';
