// The scrape path of the learner (a pod's own TTFT histogram teaches when this agent measures no
// TTFT there: non-streamed traffic, other agents' traffic) on real simulated pods.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_SHAPE, fitOracleModel, runScenario } from '../bench/routing/harness.ts';
import { BENCH_STRATEGIES, type StrategyFactory } from '../bench/routing/strategies.ts';
import { calibrateWorkload, multiTurnChat } from '../bench/routing/prefix-workloads.ts';

test('non-streamed: a cold start into overload does not teach the idle cost the wait (scrape TTFTs met on arrival)', () => {
  // Multi-turn chat at 1.6× the prefix-blind capacity: every pod saturated for the first ~20 s
  // (nothing cached yet). The histogram's first tokens of an interval arrived one TTFT earlier;
  // read against the last scrape alone, the seconds-long TTFTs of requests that waited behind a
  // queue that had just drained were learned as met with nothing ahead, `base` wound up to 3 s,
  // the router priced each held request at ~0.9 s and conversations scattered for a minute.
  const ms = 300_000;
  const load = 1.6;
  const capacity = calibrateWorkload(multiTurnChat, 99, DEFAULT_SHAPE);
  const oracle = fitOracleModel({ longShare: 0 }, capacity, 7, DEFAULT_SHAPE);
  const nonStreamed = BENCH_STRATEGIES.find(([n]) => n === 'kinference, non-streamed')![1];
  // Each request's TTFT by its arrival time.
  const ttfts: [number, number][] = [];
  const measured: StrategyFactory = (ctx) => {
    const s = nonStreamed(ctx);
    return {
      ...s,
      choose: (a) => {
        const choice = s.choose(a);
        return { ...choice, firstToken: (t) => (ttfts.push([a.at, t]), choice.firstToken?.(t)) };
      },
    };
  };
  runScenario(
    {
      name: 'multi-turn, non-streamed',
      speeds: [1, 1, 1, 1],
      shape: DEFAULT_SHAPE,
      phases: [{ ms, load }],
      mix: { longShare: 0 },
      sloMs: 1000,
      seed: 1021,
      workload: (seed, total) => multiTurnChat(seed, ms, load * total),
    },
    measured,
    capacity,
    oracle,
  );
  // Past the cold start (arrivals from 30 s on): 85.4 % within the SLO before the fix, p90 2.0 s;
  // with it 100 %, p90 144 ms.
  const after = ttfts.filter(([at]) => at >= 30_000).map(([, t]) => t);
  const within = after.filter((t) => t <= 1000).length / after.length;
  assert.ok(within > 0.95, `${(within * 100).toFixed(1)} % within the SLO after the cold start`);
});
