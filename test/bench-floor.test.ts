// bench:routing-prefix's TTFT floor (prefix-workloads.ts ttftFloors) is what the "floor vs GIE p90"
// column rests on: it must be a lower bound for every request under any router, or the claim that
// some gain is out of reach is wrong. Real simulated runs, each request against its own floor.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_SHAPE, fitOracleModel, POOL_SHAPES, runScenario } from '../bench/routing/harness.ts';
import { BENCH_STRATEGIES, type StrategyFactory } from '../bench/routing/strategies.ts';
import { gieProfile } from '../bench/routing/gie.ts';
import { calibrateWorkload, multiTurnChat, sharedSystemPrompt, ttftFloors } from '../bench/routing/prefix-workloads.ts';
import type { Arrival } from '../bench/routing/workload.ts';

const MS = 40_000;
const strategy = (name: string) => BENCH_STRATEGIES.find(([n]) => n === name)![1];
const noChunking = POOL_SHAPES.find((s) => !s.chunkedPrefill)!;

/** Every request's TTFT, keyed by its arrival. */
function measured(f: StrategyFactory, ttfts: Map<Arrival, number>): StrategyFactory {
  return (ctx) => {
    const s = f(ctx);
    return {
      ...s,
      choose: (a) => {
        const choice = s.choose(a);
        return { ...choice, firstToken: (ms) => (ttfts.set(a, ms), choice.firstToken?.(ms)) };
      },
    };
  };
}

test('no request beats its floor, under any strategy, on equal and mixed pods, with and without chunking', () => {
  const cases = [
    { workload: multiTurnChat, seed: 21, shape: DEFAULT_SHAPE, speeds: [1, 1, 1, 1], load: 1.2 },
    { workload: sharedSystemPrompt, seed: 22, shape: DEFAULT_SHAPE, speeds: [1, 1, 0.5, 0.25], load: 0.8 },
    { workload: sharedSystemPrompt, seed: 23, shape: noChunking, speeds: [1, 1, 1, 1], load: 0.8 },
  ];
  for (const c of cases) {
    const capacity = calibrateWorkload(c.workload, 99, c.shape);
    const oracle = fitOracleModel({ longShare: 0 }, capacity, 7, c.shape);
    for (const [name, factory] of [
      ['round-robin', strategy('round-robin')],
      ['kinference', strategy('kinference')],
      ['GIE', gieProfile(true)],
    ] as const) {
      const ttfts = new Map<Arrival, number>();
      let arrivals: Arrival[] = [];
      runScenario(
        {
          name: 'floor',
          speeds: c.speeds,
          shape: c.shape,
          phases: [{ ms: MS, load: c.load }],
          mix: { longShare: 0 },
          sloMs: 1000,
          seed: c.seed,
          workload: (seed, total) => (arrivals = c.workload(seed, MS, c.load * total)),
        },
        measured(factory, ttfts),
        capacity,
        oracle,
      );
      const floors = ttftFloors(arrivals, c.shape, c.speeds);
      assert.equal(ttfts.size, arrivals.length);
      arrivals.forEach((a, i) => {
        const ttft = ttfts.get(a)!;
        assert.ok(ttft >= floors[i], `${name}, ${c.shape.name}: request ${i} took ${ttft} ms, floor ${floors[i]} ms`);
      });
    }
  }
});
