// What a routing strategy is to the benchmark harness: the pods it sees, the choice it returns, and
// the context it is built with. Shared by every strategy file and the harness.
import type { Pod, PodLoad, PredictorParams } from '../../agent/types.ts';
import type { PodTelemetry } from '../../agent/telemetry/pod-telemetry.ts';
import type { SimEngine, SimKvEvent } from '../../shared/sim/engine.ts';
import type { Arrival } from './workload.ts';

export interface BenchPod {
  index: number;
  pod: Pod;
  /** The simulated server itself: only the oracle may look. */
  engine: SimEngine;
  speed: number;
  /** This agent's requests to the pod that have not finished. */
  inFlight: number;
  /** True prompt tokens at the pod awaiting their first token, every source's: only the oracle may look. */
  pendingPromptTokens: number;
  /** The last scrape, as every realistic strategy sees it. */
  lastLoad?: PodLoad;
  telemetry: PodTelemetry;
  /** Where the engine's KV-cache events go, one batch per scheduler step (a strategy that subscribes sets it). */
  kvEvents?: (events: SimKvEvent[], at: number) => void;
}

export interface Choice {
  pod: number;
  /** The strategy's own TTFT prediction, for MAPE (Kinference only). */
  predictedMs?: number;
  firstToken?(ms: number): void;
  done?(): void;
}

export interface BenchStrategy {
  choose(a: Arrival): Choice;
  scraped?(p: BenchPod, load: PodLoad): void;
  /** How often this strategy reads the pods' metrics (ms); default the harness's SCRAPE_INTERVAL_MS. */
  scrapeIntervalMs?: number;
}

export interface StrategyContext {
  pods: BenchPod[];
  now: () => number;
  rand: () => number;
  sloMs: number;
  scrapeIntervalMs: number;
  /** Linear TTFT model fitted offline at speed 1 on the true queue: the oracle's knowledge. */
  oracleModel: PredictorParams;
}

export type StrategyFactory = (ctx: StrategyContext) => BenchStrategy;
