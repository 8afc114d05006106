// Replays one scenario's recorded arrivals against a pool of simulated vLLM engines in virtual
// time, routing each arrival with one strategy. Scrapes happen every scrapeIntervalMs of
// virtual time, exactly as the agent's scraper would see the pods.
import { TtftPredictor } from '../../agent/predict/predictor.ts';
import { PodTelemetry } from '../../agent/telemetry/pod-telemetry.ts';
import { ADAPTERS } from '../../agent/telemetry/adapters.ts';
import { parsePromText } from '../../agent/telemetry/promtext.ts';
import type { Engine, PodLoad, PredictorParams } from '../../agent/types.ts';
import { BUCKETS } from '../../shared/sim/buckets.ts';
import { VirtualClock } from '../../shared/sim/clock.ts';
import {
  SimEngine,
  type EngineSnapshot,
  type SeqEvents,
  type SimEngineOptions,
  type SubmitResult,
} from '../../shared/sim/engine.ts';
import { DEFAULT_LATENCY } from '../../shared/sim/latency.ts';
import { renderMetrics } from '../../shared/sim/metrics.ts';
import { mulberry32 } from '../../shared/sim/random.ts';
import type { BenchPod, StrategyFactory } from './strategies.ts';
import { generateArrivals, generateDirect, type Arrival, type Phase, type PromptMix } from './workload.ts';

/**
 * What kind of pods a pool has: engine (its metrics format), batch size, how costly prefill and
 * decode are relative to the simulator's 8B-on-one-GPU default, and whether long prefills are
 * chunked. The benches run over several so that nothing is tuned to one simulator.
 */
export interface PodShape {
  name: string;
  engine: Engine;
  maxSeqs: number;
  prefillScale: number;
  decodeScale: number;
  chunkedPrefill: boolean;
  /** Not looked at while choosing the agent's constants: reported, never tuned on. */
  heldOut: boolean;
  /** KV-cache capacity per pod in tokens; default the simulator's 65,536. */
  kvCapacityTokens?: number;
  /** Relative pod speeds where a bench lets the shape choose them (bench:peak); default all 1. */
  speeds?: number[];
  /** A prefill at a full batch runs (1 + this) times slower; default the simulator's. */
  batchSlowdown?: number;
}

export const DEFAULT_SHAPE: PodShape = {
  name: 'vllm 16 seqs',
  engine: 'vllm',
  maxSeqs: 16,
  prefillScale: 1,
  decodeScale: 1,
  chunkedPrefill: true,
  heldOut: false,
};

/** Every shape is the default but for what it names; heldOut says whether the agent was tuned on it. */
export const POOL_SHAPES: PodShape[] = [
  DEFAULT_SHAPE,
  { ...DEFAULT_SHAPE, name: 'vllm 64 seqs, prefill 2x', maxSeqs: 64, prefillScale: 2, heldOut: false },
  { ...DEFAULT_SHAPE, name: 'vllm 16 seqs, mixed speeds', heldOut: false, speeds: [1, 1, 0.5, 0.25] },
  { ...DEFAULT_SHAPE, name: 'vllm 4 seqs', maxSeqs: 4, heldOut: true },
  {
    ...DEFAULT_SHAPE,
    name: 'vllm 256 seqs, 0.25x costs',
    maxSeqs: 256,
    prefillScale: 0.25,
    decodeScale: 0.25,
    heldOut: true,
  },
  { ...DEFAULT_SHAPE, name: 'vllm 32 seqs, 4x costs', maxSeqs: 32, prefillScale: 4, decodeScale: 4, heldOut: true },
  { ...DEFAULT_SHAPE, name: 'vllm 16 seqs, no chunked prefill', chunkedPrefill: false, heldOut: true },
  { ...DEFAULT_SHAPE, name: 'tgi 16 seqs', engine: 'tgi', heldOut: true },
  { ...DEFAULT_SHAPE, name: 'sglang 32 seqs, decode 2x', engine: 'sglang', maxSeqs: 32, decodeScale: 2, heldOut: true },
];

export interface Scenario {
  name: string;
  speeds: number[];
  phases: Phase[];
  mix: PromptMix;
  sloMs: number;
  /** Traffic straight to one pod, as a fraction of that pod's capacity. */
  direct?: { pod: number; load: number };
  seed: number;
  shape?: PodShape;
  /** Generates the arrivals instead of `phases` + `mix` (the prefix-sharing workloads). */
  workload?: (seed: number, capacityPerS: number) => Arrival[];
}

/** The mean of several seeds' results (wall time summed): one seed is noise. */
export function meanResult(runs: RunResult[]): RunResult {
  const avg = (f: (r: RunResult) => number) => runs.reduce((s, r) => s + f(r), 0) / runs.length;
  return {
    requests: avg((r) => r.requests),
    rejected: avg((r) => r.rejected),
    p50: avg((r) => r.p50),
    p90: avg((r) => r.p90),
    p99: avg((r) => r.p99),
    sloAttainment: avg((r) => r.sloAttainment),
    mape: avg((r) => r.mape),
    cacheHitRate: avg((r) => r.cacheHitRate),
    wallMs: runs.reduce((s, r) => s + r.wallMs, 0),
  };
}

export interface RunResult {
  requests: number;
  rejected: number;
  p50: number;
  p90: number;
  p99: number;
  sloAttainment: number;
  /** Mean absolute percentage error of the strategy's TTFT predictions (NaN if it makes none). */
  mape: number;
  /** Prompt tokens the pods found in their prefix caches, over all prompt tokens (vLLM's hits / queries). */
  cacheHitRate: number;
  /** ms of real time the run took. */
  wallMs: number;
}

export const SCRAPE_INTERVAL_MS = 100;

/** The true prompt tokens at a pod still awaiting their first token, from every source. */
interface PendingPrompts {
  pendingPromptTokens: number;
}

/** Submits to the engine, keeping `pending` exact: a prompt counts until its first token. */
export function submitTracked(
  engine: SimEngine,
  pending: PendingPrompts,
  a: Arrival,
  events: SeqEvents = {},
): SubmitResult {
  let waiting = true;
  const prefilled = () => {
    if (!waiting) return;
    waiting = false;
    pending.pendingPromptTokens -= a.promptTokens;
  };
  const result = engine.submit(
    { promptTokens: a.promptTokens, maxTokens: a.maxTokens, tokens: a.tokens, outputTokens: a.outputTokens },
    {
      onToken: (at, n) => {
        if (n === 1) prefilled();
        events.onToken?.(at, n);
      },
      onDone: (at, outcome) => {
        prefilled();
        events.onDone?.(at, outcome);
      },
    },
  );
  if (result.accepted) pending.pendingPromptTokens += a.promptTokens;
  return result;
}
/** One simulated pod per speed, seeded from `seed`, named `<namespace>/pod-<i>`. */
export function benchPods(
  clock: VirtualClock,
  speeds: readonly number[],
  seed: number,
  namespace: string,
  shape?: PodShape,
): BenchPod[] {
  return speeds.map((speed, index) => {
    const pod: BenchPod = {
      index,
      pod: {
        uid: `${namespace}/pod-${index}`,
        name: `pod-${index}`,
        namespace: 'bench',
        node: 'bench',
        address: `sim:${index}`,
        models: ['m'],
        engine: shape?.engine ?? 'vllm',
      },
      // Events go to whichever strategy subscribed (the precise ones); none is the default.
      engine: engineFor(clock, speed, seed * 100 + index, shape, (events, at) => pod.kvEvents?.(events, at)),
      speed,
      inFlight: 0,
      pendingPromptTokens: 0,
      telemetry: new PodTelemetry(),
    };
    return pod;
  });
}

export function engineFor(
  clock: VirtualClock,
  speed: number,
  seed: number,
  shape: PodShape = DEFAULT_SHAPE,
  onKvEvents?: SimEngineOptions['onKvEvents'],
): SimEngine {
  const l = DEFAULT_LATENCY;
  return new SimEngine(
    {
      onKvEvents,
      kvCapacityTokens: shape.kvCapacityTokens,
      maxSeqs: shape.maxSeqs,
      speed,
      seed,
      maxQueue: 100_000,
      // Without chunking a prompt is prefilled whole in one step, however long.
      maxBatchedTokens: shape.chunkedPrefill ? 2048 : 16_384,
      buckets: BUCKETS[shape.engine],
      latency: {
        prefillMsPerToken: l.prefillMsPerToken * shape.prefillScale,
        stepBaseMs: l.stepBaseMs * shape.decodeScale,
        decodeMsPerSeq: l.decodeMsPerSeq * shape.decodeScale,
        decodeMsPerKContext: l.decodeMsPerKContext * shape.decodeScale,
        prefillBatchSlowdown: shape.batchSlowdown ?? l.prefillBatchSlowdown,
      },
    },
    clock,
  );
}

/**
 * A scrape as the agent sees it: vLLM pods straight from the snapshot (the same numbers, cheaper);
 * TGI and SGLang through their real /metrics page and the agent's adapter, so what those formats
 * lack (TGI has no TTFT histogram) is lacking here too.
 */
export function scrapeLoad(engine: SimEngine, shape: PodShape): PodLoad {
  const snapshot = engine.snapshot();
  if (shape.engine === 'vllm') return loadOf(snapshot);
  const page = parsePromText(
    renderMetrics(snapshot, { flavor: shape.engine, modelName: 'm', startedAt: 0 }),
    ADAPTERS[shape.engine].selector,
  );
  const result = ADAPTERS[shape.engine].toLoad(page, snapshot.at);
  if (!result.ok) throw new Error(`${shape.name}: ${result.error}`);
  return result.load;
}

export function loadOf(s: EngineSnapshot): PodLoad {
  const finished = s.counters.finished;
  return {
    at: s.at,
    engine: 'vllm',
    waiting: s.waiting,
    running: s.running,
    kvCache: s.kvCache,
    ttftSum: s.histograms.ttft.sum,
    ttftCount: s.histograms.ttft.count,
    queueTimeSum: s.histograms.queue.sum,
    queueTimeCount: s.histograms.queue.count,
    promptTokens: s.counters.promptTokens,
    generationTokens: s.counters.generationTokens,
    finished: finished.stop + finished.length + finished.abort,
    // vllm:prefix_cache_queries/hits_total and cache_config_info, as the vLLM adapter reads them.
    prefixCacheQueries: s.counters.prefixQueries,
    prefixCacheHits: s.counters.prefixHits,
    kvCapacityTokens: s.kvCapacityTokens,
  };
}

export function percentile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

/** Requests per second one speed-1 pod completes when saturated with this mix. */
export function calibrateCapacity(mix: PromptMix, seed = 99, shape: PodShape = DEFAULT_SHAPE): number {
  const clock = new VirtualClock();
  const engine = engineFor(clock, 1, seed, shape);
  const work = generateArrivals(seed, [{ ms: 1_000_000, load: 1 }], 1, mix).slice(0, 600);
  for (const a of work) engine.submit({ promptTokens: a.promptTokens, maxTokens: a.maxTokens });
  const end = engine.runUntilIdle();
  return (work.length / end) * 1000;
}

/** The oracle's model: least squares (RLS without forgetting) on the true queue at arrival. */
export function fitOracleModel(
  mix: PromptMix,
  capacityPerS: number,
  seed = 7,
  shape: PodShape = DEFAULT_SHAPE,
): PredictorParams {
  const fit = new TtftPredictor({ forgetting: 1, priorVariance: 1e8 });
  for (const load of [0.5, 0.8, 0.95, 1.1]) {
    const clock = new VirtualClock();
    const engine = engineFor(clock, 1, seed, shape);
    const pending: PendingPrompts = { pendingPromptTokens: 0 };
    for (const a of generateArrivals(seed, [{ ms: 60_000, load }], capacityPerS, mix)) {
      clock.set(a.at);
      engine.advanceTo(a.at);
      const s = engine.snapshot();
      const features = {
        queued: s.waiting,
        running: s.running,
        promptTokens: a.promptTokens,
        pendingPromptTokens: pending.pendingPromptTokens,
      };
      submitTracked(engine, pending, a, {
        onToken: (at, n) => {
          if (n === 1) fit.observe(features, at - a.at);
        },
      });
    }
    engine.runUntilIdle();
  }
  return fit.params;
}

export function runScenario(
  scenario: Scenario,
  factory: StrategyFactory,
  capacityPerPodS: number,
  oracleModel: PredictorParams,
): RunResult {
  const started = performance.now();
  const clock = new VirtualClock();
  const pods = benchPods(clock, scenario.speeds, scenario.seed, 'bench', scenario.shape);
  const totalCapacity = capacityPerPodS * scenario.speeds.reduce((a, b) => a + b, 0);
  const arrivals = scenario.workload
    ? scenario.workload(scenario.seed, totalCapacity)
    : generateArrivals(scenario.seed, scenario.phases, totalCapacity, scenario.mix);
  const end = scenario.phases.reduce((t, p) => t + p.ms, 0);
  const direct = scenario.direct
    ? generateDirect(
        scenario.seed + 1,
        scenario.direct.pod,
        scenario.direct.load * capacityPerPodS * scenario.speeds[scenario.direct.pod],
        0,
        end,
      )
    : [];
  const events: Arrival[] = [...arrivals, ...direct].sort((a, b) => a.at - b.at);
  const strategy = factory({
    pods,
    now: () => clock.now(),
    rand: mulberry32(scenario.seed + 2),
    sloMs: scenario.sloMs,
    scrapeIntervalMs: SCRAPE_INTERVAL_MS,
    oracleModel,
  });

  const scrapeIntervalMs = strategy.scrapeIntervalMs ?? SCRAPE_INTERVAL_MS;
  const ttfts: number[] = [];
  let apeSum = 0;
  let apeCount = 0;
  let rejected = 0;
  let nextScrape = 0;
  const advance = (t: number) => {
    clock.set(t);
    for (const p of pods) p.engine.advanceTo(t);
  };

  for (const a of events) {
    while (nextScrape <= a.at) {
      advance(nextScrape);
      for (const p of pods) {
        const load = scrapeLoad(p.engine, scenario.shape ?? DEFAULT_SHAPE);
        p.telemetry.record(load);
        p.lastLoad = load;
        strategy.scraped?.(p, load);
      }
      nextScrape += scrapeIntervalMs;
    }
    advance(a.at);
    if (a.direct !== undefined) {
      submitTracked(pods[a.direct].engine, pods[a.direct], a);
      continue;
    }
    const choice = strategy.choose(a);
    const pod = pods[choice.pod];
    const result = submitTracked(pod.engine, pod, a, {
      onToken: (at, n) => {
        if (n !== 1) return;
        const ttft = at - a.at;
        ttfts.push(ttft);
        if (choice.predictedMs !== undefined && ttft > 0) {
          apeSum += Math.abs(choice.predictedMs - ttft) / ttft;
          apeCount++;
        }
        choice.firstToken?.(ttft);
      },
      onDone: () => {
        pod.inFlight--;
        choice.done?.();
      },
    });
    if (result.accepted) pod.inFlight++;
    else rejected++;
  }
  for (const p of pods) p.engine.runUntilIdle();

  const sorted = ttfts.sort((x, y) => x - y);
  const counters = pods.map((p) => p.engine.snapshot().counters);
  const queries = counters.reduce((sum, c) => sum + c.prefixQueries, 0);
  const requests = arrivals.length;
  return {
    requests,
    rejected,
    p50: percentile(sorted, 0.5),
    p90: percentile(sorted, 0.9),
    p99: percentile(sorted, 0.99),
    sloAttainment: sorted.filter((t) => t <= scenario.sloMs).length / requests,
    mape: apeCount ? apeSum / apeCount : NaN,
    cacheHitRate: queries > 0 ? counters.reduce((sum, c) => sum + c.prefixHits, 0) / queries : 0,
    wallMs: performance.now() - started,
  };
}
