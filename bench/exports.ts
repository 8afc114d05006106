// What the agent's exports weigh as the cluster grows: the /metrics page and the /debug/state JSON
// at 10 to 8,000 known pods (8 local, the rest on peers' nodes, 8 to a node), built by the
// production code (the pool's state, the metrics registry). "before" exports a series per peer
// pod, as the agent did until issue 13. Also the CPU each /metrics scrape spends on the pods'
// predictions: before, a prediction for every known pod (the whole debug state); now, the local
// pods and the fastest pod of the bounded number of peer nodes. Run: npm run bench:exports
import { createMetrics, podPredictionsOf } from '../agent/server/observability/metrics.ts';
import { DEFAULT_STATE_PEER_PODS } from '../agent/server/admin/admin-views.ts';
import { DEFAULT_LIMITS } from '../agent/config/limits.ts';
import { poolKnowing } from './known-pods.ts';
import type { Candidate } from '../agent/route/candidate.ts';
import { routeCandidate, routePod } from '../test/helpers/route-fixtures.ts';

const local = (n: number): Candidate[] =>
  Array.from({ length: n }, (_, i) =>
    routeCandidate(`pod-${i}`, {
      pod: routePod(`pod-${i}`, { node: 'here', address: `10.0.0.${i}:8000`, models: ['llama-3-8b'] }),
      maxAgeMs: 200,
      params: { base: 20, perQueued: 180, perRunning: 3, perKPromptTokens: 260 },
    }),
  );

const kb = (bytes: number) => `${(bytes / 1024).toFixed(1)} KB`;

/** Mean µs of CPU per call (warm, then at least 200 ms of calls). */
function usPerCall(call: () => unknown): number {
  for (let i = 0; i < 20; i++) call();
  let calls = 0;
  const started = performance.now();
  const cpu = process.cpuUsage();
  while (performance.now() - started < 200) {
    call();
    calls++;
  }
  const used = process.cpuUsage(cpu);
  return (used.user + used.system) / calls;
}
const rows = [];
for (const known of [10, 100, 1000, 8000]) {
  const pool = poolKnowing(known, local(Math.min(known, 8)));
  const now = createMetrics({
    podPredictions: () =>
      podPredictionsOf(pool.predictions(DEFAULT_LIMITS.maxLabelValues), DEFAULT_LIMITS.maxLabelValues),
  });
  const before = createMetrics({
    podPredictions: () => {
      const state = pool.debugState();
      const all = [
        ...state.local,
        ...state.remote.map((r) => ({ ...r, pod: { ...r.pod, name: `${r.pod.node}/${r.pod.name}` } })),
      ];
      return podPredictionsOf({ local: all, remote: [] }, 0);
    },
  });
  const predictionsBefore = usPerCall(() => podPredictionsOf(pool.debugState(), DEFAULT_LIMITS.maxLabelValues));
  const predictionsNow = usPerCall(() =>
    podPredictionsOf(pool.predictions(DEFAULT_LIMITS.maxLabelValues), DEFAULT_LIMITS.maxLabelValues),
  );
  rows.push({
    'known pods': known,
    'predictions per /metrics, µs before': predictionsBefore.toFixed(0),
    'µs now': predictionsNow.toFixed(0),
    '/metrics before': kb((await before.registry.metrics()).length),
    '/metrics now': kb((await now.registry.metrics()).length),
    '/debug/state pods before': kb(JSON.stringify(pool.debugState()).length),
    '/debug/state pods now': kb(JSON.stringify(pool.debugState(DEFAULT_STATE_PEER_PODS)).length),
  });
}
console.table(rows);
