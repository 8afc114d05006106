// The routing strategies compared by `npm run bench:routing`, over the same candidates.
// Baselines reimplement what each system does, from its public description; Kinference is the
// production pool + predictor + router, unmodified.
import { PodPool } from '../../agent/pool/pool.ts';
import { decide, type Strategy } from '../../agent/route/router.ts';
import { STRATEGIES } from '../../agent/route/strategies.ts';
import { DEFAULT_PREDICTOR } from '../../agent/predict/predictor.ts';
import type { Candidate, WindowedMetric } from '../../agent/route/candidate.ts';
import type { EffectivePolicy, PodLoad, PredictorParams, RouteRequest } from '../../agent/types.ts';
import { DEFAULT_PREFIX_MAX_BLOCKS, promptBlocks } from '../../agent/prefix/blocks.ts';
import { promptTextOf, type Arrival } from './workload.ts';
import type { BenchPod, StrategyContext, StrategyFactory } from './strategy-types.ts';
import { gieProfile } from './gie.ts';
import { poolOptions, routePolicy, routeRequest } from '../../test/helpers/route-fixtures.ts';

// The strategy's shape lives in strategy-types.ts, so strategies written elsewhere (gie.ts) need not
// import this list of them.
export type { BenchPod, StrategyContext, StrategyFactory } from './strategy-types.ts';

/**
 * A strategy of agent/route run by the production router, over what every realistic baseline
 * sees: each pod's last scrape and this agent's requests in flight. No filter drops a pod here.
 */
const routed =
  (make: () => Strategy): StrategyFactory =>
  (ctx) => {
    const strategy = make();
    const policy: EffectivePolicy = { ...benchPolicy(ctx.sloMs), sloTtftMs: Infinity, exclude: [] };
    const stay = { allowed: false, reason: 'bench', providers: [] };
    return {
      choose: (a) => {
        const candidates = ctx.pods.map(scrapedCandidate);
        const d = decide({ request: benchRequest(a), policy, candidates, leave: stay, rand: ctx.rand, strategy });
        if (d.action !== 'pod') throw new Error('no pod at all');
        return { pod: candidates.indexOf(d.chosen.candidate) };
      },
    };
  };

function scrapedCandidate(p: BenchPod): Candidate {
  const load = p.lastLoad;
  return localCandidate(p, {
    queuedNow: load?.waiting ?? 0,
    running: load?.running ?? 0,
    kvCache: Number.isFinite(load?.kvCache) ? (load!.kvCache as number) : 0,
    params: DEFAULT_PREDICTOR.prior,
    pendingPromptTokens: 0,
  });
}

/** A bench pod as a router candidate: local, always fresh and healthy, with this agent's in-flight count. */
function localCandidate(
  p: BenchPod,
  view: Pick<Candidate, 'queuedNow' | 'running' | 'kvCache' | 'params' | 'pendingPromptTokens'>,
): Candidate {
  return {
    pod: p.pod,
    where: 'local',
    ageMs: 0,
    maxAgeMs: Infinity,
    healthy: true,
    average: () => 0,
    inFlight: p.inFlight,
    unseenSent: 0,
    networkCostMs: 0,
    ...view,
  };
}

/**
 * Linkerd's balancer: power of two choices over a peak-EWMA of observed latency (here, TTFT)
 * multiplied by outstanding requests. The EWMA jumps up to a new peak at once and decays
 * toward lower values with a 10 s time constant.
 */
const peakEwma: StrategyFactory = (ctx) => {
  const decayMs = 10_000;
  const defaultRttMs = 100;
  const ewma = ctx.pods.map(() => ({ value: defaultRttMs, at: 0 }));
  const cost = (i: number) => {
    const e = ewma[i];
    return e.value * (ctx.pods[i].inFlight + 1);
  };
  return {
    choose: () => {
      const n = ctx.pods.length;
      const a = Math.floor(ctx.rand() * n);
      let b = Math.floor(ctx.rand() * (n - 1));
      if (b >= a) b++;
      const pod = cost(a) <= cost(b) ? a : b;
      return {
        pod,
        firstToken: (ms) => {
          const e = ewma[pod];
          const now = ctx.now();
          if (ms > e.value) e.value = ms;
          else {
            const w = Math.exp(-(now - e.at) / decayMs);
            e.value = e.value * w + ms * (1 - w);
          }
          e.at = now;
        },
      };
    },
  };
};

/**
 * Kinference's router with perfect information: each pod's true queue, batch and pending prompt
 * tokens (every source's, outside traffic included) at the instant of decision, no scrape lag,
 * and its true speed, with the TTFT model fitted offline on that truth. What Kinference would do
 * if it could see everything.
 */
const oracle: StrategyFactory = (ctx) => {
  const policy = benchPolicy(ctx.sloMs);
  const fallback = { ...policy, sloTtftMs: Infinity, exclude: [] };
  const stay = { allowed: false, reason: 'bench', providers: [] };
  return {
    choose: (a) => {
      const candidates = ctx.pods.map((p) => ({
        ...oracleCandidate(p, ctx.oracleModel),
        average: (metric: WindowedMetric) =>
          metric === 'queued' ? p.telemetry.waiting.average(30_000, ctx.now()) || 0 : 0,
      }));
      const request = benchRequest(a);
      let d = decide({ request, policy, candidates, leave: stay, rand: ctx.rand });
      if (d.action !== 'pod') d = decide({ request, policy: fallback, candidates, leave: stay, rand: ctx.rand });
      if (d.action !== 'pod') throw new Error('no pod at all');
      const chosen = d.chosen.candidate.pod.uid;
      return { pod: ctx.pods.findIndex((p) => p.pod.uid === chosen) };
    },
  };
};

/** A pod as it truly is this instant (true queue, batch and pending prompts; speed-scaled model). */
export function oracleCandidate(p: BenchPod, model: PredictorParams): Candidate {
  const s = p.engine.snapshot();
  const slow = 1 / p.speed;
  return localCandidate(p, {
    queuedNow: s.waiting,
    running: s.running,
    kvCache: s.kvCache,
    params: {
      base: model.base * slow,
      perQueued: model.perQueued * slow,
      perRunning: model.perRunning * slow,
      perKPromptTokens: model.perKPromptTokens * slow,
      perKPendingTokens: (model.perKPendingTokens ?? 0) * slow,
    },
    pendingPromptTokens: p.pendingPromptTokens,
  });
}

export function benchPolicy(sloMs: number): EffectivePolicy {
  return routePolicy({ name: 'bench', sloTtftMs: sloMs, exclude: [{ metric: 'queued', above: 2, windowMs: 30_000 }] });
}

export function benchRequest(a: Arrival): RouteRequest {
  return routeRequest({
    promptTokens: a.promptTokens,
    // As the agent computes them from the request's text (with the production default cap of blocks).
    ...(a.tokens ? { promptBlocks: promptBlocks(promptTextOf(a.tokens), undefined, DEFAULT_PREFIX_MAX_BLOCKS) } : {}),
  });
}

/** The telemetry of an agent before prefix-cache awareness: no prefix counters, no KV capacity. */
function prefixBlind(load: PodLoad): PodLoad {
  const { prefixCacheQueries: _q, prefixCacheHits: _h, kvCapacityTokens: _c, ...rest } = load;
  return rest;
}

/**
 * Kinference: the production pool (telemetry windows, per-node model scaled per pod) and router. With
 * `streamed` false every request is non-streamed: the agent measures no TTFT of its own and its
 * model learns from the pods' TTFT histograms (a non-streamed answer here is never sooner than
 * the prediction often enough to matter, so the bound it gives is left out).
 */
const kinferenceWith =
  (streamed: boolean, prefixAware = true, precise?: PreciseSetup): StrategyFactory =>
  (ctx) => {
    const pool = new PodPool(
      poolOptions(ctx.now, { node: 'bench', scrapeIntervalMs: ctx.scrapeIntervalMs, networkCostMs: 0 }),
    );
    pool.setLocalPods(ctx.pods.map((p) => p.pod));
    const tokensOf = precise?.(ctx, pool);
    const indexOf = new Map(ctx.pods.map((p) => [p.pod.uid, p.index]));
    const policy = benchPolicy(ctx.sloMs);
    // No overflow and no waiting in this comparison: when every pod is excluded or predicted over
    // the SLO, the request still goes to the best-scored pod, so every strategy's TTFTs are over
    // the same requests. The agent would hold it in line for the policy's wait.max and then answer
    // 429 (docs/api.md); it never serves a request no pod is predicted to answer in time.
    const fallback: EffectivePolicy = { ...policy, sloTtftMs: Infinity, exclude: [] };
    const stay = { allowed: false, reason: 'bench', providers: [] };
    return {
      scraped: (p, load) => pool.recordLoad(p.pod.uid, prefixAware ? load : prefixBlind(load), p.telemetry),
      choose: (a) => {
        const { promptBlocks: blocks, ...blind } = benchRequest(a);
        const request: RouteRequest = prefixAware && blocks ? { ...blind, promptBlocks: blocks } : blind;
        const ids = tokensOf?.(a);
        const candidates = pool.candidates(request.model, request.promptBlocks, ids ? { ids } : undefined);
        let d = decide({ request, policy, candidates, leave: stay, rand: ctx.rand });
        if (d.action !== 'pod') d = decide({ request, policy: fallback, candidates, leave: stay, rand: ctx.rand });
        if (d.action !== 'pod') throw new Error('no pod at all');
        const ticket = pool.begin(d.chosen.candidate, a.promptTokens, 'chat', streamed, request.promptBlocks);
        return {
          pod: indexOf.get(d.chosen.candidate.pod.uid)!,
          predictedMs: d.predictedTtftMs,
          firstToken: (ms) => streamed && ticket.firstByte(ms),
          done: () => ticket.end(true),
        };
      },
    };
  };

/**
 * Gives a Kinference strategy a precise prefix view: attaches it to the pool (as the agent does
 * for pods whose KV events it follows) and returns the prompt's token ids for each arrival.
 */
export type PreciseSetup = (ctx: StrategyContext, pool: PodPool) => (a: Arrival) => readonly number[] | undefined;

/** Kinference with a precise prefix view (bench:routing-prefix-pressure). */
export const kinferencePrecise = (setup: PreciseSetup): StrategyFactory => kinferenceWith(true, true, setup);

/** Kinference as it was before it knew prefix caches (bench:routing-prefix compares against it). */
export const kinferencePrefixBlind: StrategyFactory = kinferenceWith(true, false);

export const BENCH_STRATEGIES: [string, StrategyFactory][] = [
  ['round-robin', routed(STRATEGIES['round-robin'])],
  ['least-request', routed(STRATEGIES['least-request'])],
  ['peak-EWMA P2C', peakEwma],
  ['queue+KV', gieProfile(false)],
  ['kinference', kinferenceWith(true)],
  ['kinference, non-streamed', kinferenceWith(false)],
  ['oracle', oracle],
];
