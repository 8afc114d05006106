// The decision benches' request, policy and candidates (bench/decide.bench.ts, bench/decide-alloc.ts,
// bench/decide-tail.ts): one definition, so every figure is about the same decision.
import type { Candidate } from '../agent/route/candidate.ts';
import { routeCandidate, routePod, routePolicy, routeRequest } from '../test/helpers/route-fixtures.ts';

export const benchPolicy = routePolicy({
  name: 'bench',
  exclude: [{ metric: 'queued', above: 2, windowMs: 30_000 }],
  waitMaxMs: 2000,
});
export const benchRequest = routeRequest({ model: 'llama-3-8b', promptTokens: 400 });
export const benchLeave = { allowed: false, reason: 'bench', providers: [] };

export function benchCandidates(n: number): Candidate[] {
  return Array.from({ length: n }, (_, i) =>
    routeCandidate(`pod-${i}`, {
      pod: routePod(`pod-${i}`, {
        node: `node-${i % 50}`,
        address: `10.0.${i >> 8}.${i & 255}:8000`,
        models: ['llama-3-8b'],
      }),
      where: i < 8 ? 'local' : 'peer',
      ageMs: 40,
      maxAgeMs: 200,
      queuedNow: i % 4,
      running: (i * 7) % 16,
      kvCache: 0.4,
      average: () => (i % 5) * 0.6,
      params: { base: 20 + (i % 3), perQueued: 180, perRunning: 3, perKPromptTokens: 260 },
      inFlight: i % 3,
      pendingPromptTokens: (i % 3) * 300,
      networkCostMs: i < 8 ? 0 : 2,
    }),
  );
}
