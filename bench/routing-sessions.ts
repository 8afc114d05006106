// `npm run bench:routing-sessions`: multi-turn chat sessions (bench/routing/prefix-workloads.ts)
// over four simulated vLLM pods with prefix caching, in virtual time: Kinference with session
// affinity (agent/route/session.ts, the session named by its conversation) against Kinference
// without it, below saturation and at 1.5× the pods' capacity. Reports the share of a session's
// turns served by the pod that served its previous turn, TTFT and SLO attainment.
// Writes bench/results/routing-sessions.json.
import { mkdirSync, writeFileSync } from 'node:fs';
import { PodPool } from '../agent/pool/pool.ts';
import { decide } from '../agent/route/router.ts';
import { stickToSession } from '../agent/route/session.ts';
import type { EffectivePolicy, RouteRequest } from '../agent/types.ts';
import { DEFAULT_SHAPE, fitOracleModel, meanResult, runScenario, type RunResult } from './routing/harness.ts';
import { calibrateWorkload, multiTurnChat } from './routing/prefix-workloads.ts';
import { benchPolicy, benchRequest, type StrategyFactory } from './routing/strategies.ts';
import { poolOptions } from '../test/helpers/route-fixtures.ts';

const SEEDS = Number(process.env.SEEDS ?? 3);
const LOADS = (process.env.LOADS ?? '0.7,1.5').split(',').map(Number);
const DURATION_MS = 4 * 60_000;
const SLO_MS = 1000;

interface Stickiness {
  turns: number;
  kept: number;
}

/** Kinference's pool and router (as bench:routing runs it), with or without session affinity. */
function kinference(affinity: boolean, stick: Stickiness): StrategyFactory {
  return (ctx) => {
    const pool = new PodPool(
      poolOptions(ctx.now, { node: 'bench', scrapeIntervalMs: ctx.scrapeIntervalMs, networkCostMs: 0 }),
    );
    pool.setLocalPods(ctx.pods.map((p) => p.pod));
    const indexOf = new Map(ctx.pods.map((p) => [p.pod.uid, p.index]));
    const policy = benchPolicy(ctx.sloMs);
    const fallback: EffectivePolicy = { ...policy, sloTtftMs: Infinity, exclude: [] };
    const stay = { allowed: false, reason: 'bench', providers: [] };
    // The session's last pod, for affinity and for counting how often a turn stays (both strategies).
    const lastPod = new Map<number, string>();
    return {
      scraped: (p, load) => pool.recordLoad(p.pod.uid, load, p.telemetry),
      choose: (a) => {
        const session = a.tokens![0]!; // the first token names the conversation
        const request: RouteRequest = benchRequest(a);
        const candidates = pool.candidates(request.model, request.promptBlocks);
        const previous = lastPod.get(session);
        let d = decide({ request, policy, candidates, leave: stay, rand: ctx.rand });
        if (affinity) d = stickToSession(d, previous);
        if (d.action !== 'pod') d = decide({ request, policy: fallback, candidates, leave: stay, rand: ctx.rand });
        if (d.action !== 'pod') throw new Error('no pod at all');
        const uid = d.chosen.candidate.pod.uid;
        if (previous !== undefined) {
          stick.turns++;
          if (previous === uid) stick.kept++;
        }
        lastPod.set(session, uid);
        const ticket = pool.begin(d.chosen.candidate, a.promptTokens, 'chat', true, request.promptBlocks);
        return {
          pod: indexOf.get(uid)!,
          predictedMs: d.predictedTtftMs,
          firstToken: (ms) => ticket.firstByte(ms),
          done: () => ticket.end(true),
        };
      },
    };
  };
}

const capacity = calibrateWorkload(multiTurnChat, 99, DEFAULT_SHAPE);
const oracle = fitOracleModel({ longShare: 0 }, capacity, 7, DEFAULT_SHAPE);
const results: Record<string, Record<string, RunResult & { keptShare: number }>> = {};
const started = performance.now();
console.log(`multi-turn chat, 4 pods, ${capacity.toFixed(2)} req/s per pod with nothing cached, SLO ${SLO_MS} ms`);
console.log('| load | strategy | turns kept on their pod | TTFT p50 | p90 | p99 | SLO attainment |');
console.log('| ---: | --- | ---: | ---: | ---: | ---: | ---: |');
for (const load of LOADS) {
  results[load] = {};
  for (const [name, affinity] of [
    ['kinference, session affinity', true],
    ['kinference, no affinity', false],
  ] as const) {
    const stick: Stickiness = { turns: 0, kept: 0 };
    const runs = Array.from({ length: SEEDS }, (_, i) =>
      runScenario(
        {
          name: 'sessions',
          speeds: [1, 1, 1, 1],
          phases: [{ ms: DURATION_MS, load }],
          mix: { longShare: 0 },
          sloMs: SLO_MS,
          seed: 41 + 1000 * i,
          workload: (seed, total) => multiTurnChat(seed, DURATION_MS, load * total),
        },
        kinference(affinity, stick),
        capacity,
        oracle,
      ),
    );
    const r = { ...meanResult(runs), keptShare: stick.kept / stick.turns };
    results[load][name] = r;
    console.log(
      `| ${load * 100}% | ${name} | ${(100 * r.keptShare).toFixed(1)}% | ${Math.round(r.p50)} ms | ${Math.round(r.p90)} ms | ${Math.round(r.p99)} ms | ${(100 * r.sloAttainment).toFixed(1)}% |`,
    );
  }
}
mkdirSync('bench/results', { recursive: true });
writeFileSync('bench/results/routing-sessions.json', JSON.stringify({ capacity, results }, null, 2) + '\n');
console.log(`\n${((performance.now() - started) / 1000).toFixed(1)} s`);
