// A peak with overflow, in virtual time: a pool of simulated engines (one pod shape), phases of
// load at multiples of the pool's capacity, 30% of the requests not allowed to leave, and a
// simulated hosted provider. Each strategy decides for every arrival: a pod, the provider, a
// wait (re-decided at every scrape until the policy's wait runs out) or a 429. Same style as
// bench/routing: recorded arrivals replayed identically to every strategy.
import { VirtualClock } from '../../shared/sim/clock.ts';
import { mulberry32 } from '../../shared/sim/random.ts';
import type { PodEstimate, PodLoad, PredictorParams } from '../../agent/types.ts';
import { benchPods, scrapeLoad, SCRAPE_INTERVAL_MS, submitTracked, type PodShape } from '../routing/harness.ts';
import type { BenchPod } from '../routing/strategies.ts';
import { generateArrivals, type Arrival, type Phase, type PromptMix } from '../routing/workload.ts';

export interface PeakScenario {
  shape: PodShape;
  speeds: number[];
  phases: Phase[];
  mix: PromptMix;
  sloMs: number;
  /** Share of requests that may not leave the cluster. */
  stayShare: number;
  /** The policy's wait for requests that may not leave. */
  waitMs: number;
  seed: number;
  /** The agent restarts at this time (ms): a new strategy, knowing only what gossip kept. */
  restartAtMs?: number;
}

export interface PeakArrival extends Arrival {
  mayLeave: boolean;
  phase: number;
}

export type PeakAction =
  | { action: 'pod'; pod: number; quantileMs?: number; firstToken?(ms: number): void; done?(): void }
  | { action: 'overflow' }
  | { action: 'wait' }
  | { action: 'reject' };

export interface PeakStrategy {
  decide(a: PeakArrival, waitedMs: number): PeakAction;
  scraped(p: BenchPod, load: PodLoad): void;
  /** What this agent gossips of its pods (peers hold it, and give it back after a restart). */
  estimates?(): PodEstimate[];
}

export interface PeakContext {
  pods: BenchPod[];
  now: () => number;
  rand: () => number;
  scenario: PeakScenario;
  /** The oracle's knowledge: the TTFT model fitted offline on the true state, and its q-quantile log margin. */
  oracle: { params: PredictorParams; logMargin: number };
  /** After a restart: this node's pods as peers last heard of them from the agent before. */
  gossiped?: PodEstimate[];
}

export type PeakStrategyFactory = (ctx: PeakContext) => PeakStrategy;

export interface PhaseResult {
  leavable: number;
  leavableWithin: number;
  staying: number;
  stayingWithin: number;
  local: number;
  overflow: number;
  rejected: number;
  /** Locally served requests with a quantile, and how many met it. */
  calibrated: number;
  calibratedWithin: number;
}

const emptyPhase = (): PhaseResult => ({
  leavable: 0,
  leavableWithin: 0,
  staying: 0,
  stayingWithin: 0,
  local: 0,
  overflow: 0,
  rejected: 0,
  calibrated: 0,
  calibratedWithin: 0,
});

/** A window's figures as shares: of leavable and must-stay requests within the SLO, of all served locally, refused. */
export interface Shares {
  leavable: number;
  staying: number;
  local: number;
  rejected: number;
}
export const shares = (r: PhaseResult): Shares => {
  const n = r.leavable + r.staying;
  return {
    leavable: r.leavable ? r.leavableWithin / r.leavable : NaN,
    staying: r.staying ? r.stayingWithin / r.staying : NaN,
    local: r.local / n,
    rejected: r.rejected / n,
  };
};
/** Two windows' counts as one. */
export const both = (a: PhaseResult, b: PhaseResult): PhaseResult => {
  const out = { ...a };
  for (const k of Object.keys(a) as (keyof PhaseResult)[]) out[k] = a[k] + b[k];
  return out;
};

/** A hosted provider's TTFT: 150–400 ms, skewed toward the low end (a log-uniform draw). */
export function providerTtftMs(rand: () => number): number {
  return 150 * Math.exp(rand() * Math.log(400 / 150));
}

export function peakArrivals(s: PeakScenario, capacityPerS: number): PeakArrival[] {
  const arrivals = generateArrivals(s.seed, s.phases, capacityPerS, s.mix);
  const rand = mulberry32(s.seed + 5);
  const bounds = s.phases.reduce<number[]>((acc, p) => [...acc, (acc.at(-1) ?? 0) + p.ms], []);
  return arrivals.map((a) => ({ ...a, mayLeave: rand() >= s.stayShare, phase: bounds.findIndex((b) => a.at < b) }));
}

export function runPeak(
  s: PeakScenario,
  factory: PeakStrategyFactory,
  capacityPerPodS: number,
  oracle: PeakContext['oracle'],
): PhaseResult[] {
  const clock = new VirtualClock();
  const pods = benchPods(clock, s.speeds, s.seed, 'peak', s.shape);
  const capacity = capacityPerPodS * s.speeds.reduce((a, b) => a + b, 0);
  const arrivals = peakArrivals(s, capacity);
  const context: PeakContext = { pods, now: () => clock.now(), rand: mulberry32(s.seed + 2), scenario: s, oracle };
  let strategy = factory(context);
  let restarted = s.restartAtMs === undefined;
  /** A restart mid-peak: requests in flight finish unseen by the new agent, as in a rollout. */
  const restartBy = (t: number) => {
    if (restarted || t < s.restartAtMs!) return;
    restarted = true;
    strategy = factory({ ...context, gossiped: strategy.estimates?.() });
  };
  const providerRand = mulberry32(s.seed + 3);
  const phases = s.phases.map(emptyPhase);
  let waiting: PeakArrival[] = [];

  const advance = (t: number) => {
    clock.set(t);
    for (const p of pods) p.engine.advanceTo(t);
  };
  const record = (a: PeakArrival, ttftMs: number | undefined) => {
    const r = phases[a.phase];
    const within = ttftMs !== undefined && ttftMs <= s.sloMs;
    if (a.mayLeave) {
      r.leavable++;
      if (within) r.leavableWithin++;
    } else {
      r.staying++;
      if (within) r.stayingWithin++;
    }
  };
  /** Decides for `a`; false when it must keep waiting. */
  const handle = (a: PeakArrival): boolean => {
    const waitedMs = clock.now() - a.at;
    const d = strategy.decide(a, waitedMs);
    if (d.action === 'wait') return false;
    const r = phases[a.phase];
    if (d.action === 'reject') {
      r.rejected++;
      record(a, undefined);
    } else if (d.action === 'overflow') {
      r.overflow++;
      record(a, waitedMs + providerTtftMs(providerRand));
    } else {
      r.local++;
      const pod = pods[d.pod];
      const result = submitTracked(pod.engine, pod, a, {
        onToken: (at, n) => {
          if (n !== 1) return;
          const ttft = at - a.at;
          record(a, ttft);
          if (d.quantileMs !== undefined) {
            r.calibrated++;
            if (ttft - waitedMs <= d.quantileMs) r.calibratedWithin++; // the quantile is from sending
          }
          d.firstToken?.(ttft - waitedMs);
        },
        onDone: () => {
          pod.inFlight--;
          d.done?.();
        },
      });
      if (result.accepted) pod.inFlight++;
    }
    return true;
  };

  let nextScrape = 0;
  const scrapeUntil = (t: number) => {
    while (nextScrape <= t) {
      advance(nextScrape);
      for (const p of pods) {
        const load = scrapeLoad(p.engine, s.shape);
        p.telemetry.record(load);
        p.lastLoad = load;
        strategy.scraped(p, load);
      }
      // Waiting requests are re-decided whenever the view changes.
      waiting = waiting.filter((a) => !handle(a));
      nextScrape += SCRAPE_INTERVAL_MS;
    }
  };
  for (const a of arrivals) {
    scrapeUntil(a.at);
    advance(a.at);
    restartBy(a.at);
    if (!handle(a)) waiting.push(a);
  }
  const end = s.phases.reduce((t, p) => t + p.ms, 0);
  scrapeUntil(end + s.waitMs + SCRAPE_INTERVAL_MS);
  for (const p of pods) p.engine.runUntilIdle();
  return phases;
}
