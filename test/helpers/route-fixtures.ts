// Routing inputs for tests and benches: a policy, a request, a candidate and pool options, each
// with neutral defaults, so a file states only the values its cases are about.
import type { PoolOptions } from '../../agent/pool/pool.ts';
import type { Candidate } from '../../agent/route/candidate.ts';
import type { LeaveVerdict } from '../../agent/route/router.ts';
import type { EffectivePolicy, Pod, RouteRequest } from '../../agent/types.ts';

/** A policy with no exclusion rule, no overflow and no waiting. */
export function routePolicy(overrides: Partial<EffectivePolicy> = {}): EffectivePolicy {
  return {
    name: 'test',
    sloTtftMs: 500,
    sloAttainment: 0.99,
    exclude: [],
    overflow: { providers: [], denyTags: [], denyTenants: [] },
    waitMaxMs: 0,
    ...overrides,
  };
}

/** A streamed, untagged chat request of 200 prompt tokens for model `m`. */
export function routeRequest(overrides: Partial<RouteRequest> = {}): RouteRequest {
  return {
    kind: 'chat',
    model: 'm',
    tenant: 't',
    namespace: 't',
    tags: [],
    promptTokens: 200,
    stream: true,
    ...overrides,
  };
}

/** The verdict for a request that may not leave the cluster. */
export const STAY: LeaveVerdict = { allowed: false, reason: 'no overflow providers in policy', providers: [] };

/** A pod of namespace `ns` on node-a serving model `m`. */
export function routePod(name: string, overrides: Partial<Pod> = {}): Pod {
  return {
    uid: `ns/${name}`,
    name,
    namespace: 'ns',
    node: 'node-a',
    address: '127.0.0.1:1',
    models: ['m'],
    ...overrides,
  };
}

/** A fresh, healthy, idle local candidate whose prediction is 0 ms unless `params` say otherwise. */
export function routeCandidate(name: string, overrides: Partial<Candidate> = {}): Candidate {
  return {
    pod: routePod(name),
    where: 'local',
    ageMs: 0,
    maxAgeMs: 1000,
    healthy: true,
    queuedNow: 0,
    running: 0,
    kvCache: 0,
    average: () => 0,
    params: { base: 0, perQueued: 0, perRunning: 0, perKPromptTokens: 0 },
    inFlight: 0,
    unseenSent: 0,
    pendingPromptTokens: 0,
    networkCostMs: 0,
    ...overrides,
  };
}

/** Pool options for a pool on node `n` scraping every 100 ms, on the given clock. */
export function poolOptions(now: () => number, overrides: Partial<PoolOptions> = {}): PoolOptions {
  return {
    node: 'n',
    scrapeIntervalMs: 100,
    peerMaxAgeMs: 3000,
    networkCostMs: 2,
    referenceWindowMs: 30_000,
    now,
    ...overrides,
  };
}
