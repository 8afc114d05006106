// What the admin listener shows, composed from the parts that know it: readiness (discovery,
// first scrape, gossip, drain), /debug/state, and /explain by query or with a real body.
import type { DiscoveryStatus } from '../../cluster/types.ts';
import type { GossipLink } from '../../gossip/link.ts';
import type { PodPool } from '../../pool/pool.ts';
import type { Overflow } from '../../providers/overflow.ts';
import type { PodHealth } from '../../telemetry/scraper.ts';
import type { EffectivePolicy, RouteRequest } from '../../types.ts';
import type { AdminDeps, ExplainBodyQuery, Readiness } from './admin.ts';
import type { Callers } from '../request-path/caller.ts';
import { explainDecision } from './explain.ts';
import type { Identity } from '../request-path/identify.ts';
import type { RequestPath } from '../request-path/inference.ts';
import type { Metrics } from '../observability/metrics.ts';
import { parseInferenceRequest, RequestError } from '../bodies/request.ts';

/** Peers' pods /debug/state lists by default (the fastest predicted); `?peers=N` asks for more. */
export const DEFAULT_STATE_PEER_PODS = 100;

export interface AdminViewsDeps {
  node: string;
  discoveryMode: string;
  discovery: { status(): DiscoveryStatus };
  /** Gossip peers known now (gossip readiness waits for one only when there are some). */
  peers(): readonly string[];
  pool: Pick<PodPool, 'localPods' | 'debugState'>;
  scraper: { health(uid: string): PodHealth | undefined };
  gossip: GossipLink | undefined;
  draining(): boolean;
  callers: Callers;
  overflow: Overflow;
  metrics: Pick<Metrics, 'requests'>;
  requestPath: RequestPath;
  isKnownModel(model: string): boolean;
}

export function adminViews(deps: AdminViewsDeps): Pick<AdminDeps, 'readiness' | 'state' | 'explain' | 'explainBody'> {
  const { pool, callers, requestPath } = deps;
  const readiness = () => readinessOf(deps);
  const requestSummary = () => requestsByRoute(deps.metrics);
  const state = async (maxPeerPods = DEFAULT_STATE_PEER_PODS) => {
    const pods = pool.debugState(maxPeerPods);
    const policies = callers.policies;
    return {
      node: deps.node,
      ready: readiness().ready,
      discovery: { mode: deps.discoveryMode, ...deps.discovery.status() },
      requests: await requestSummary(),
      pods,
      policies: {
        loaded: policies.policies.map((p) => `${p.metadata.namespace}/${p.metadata.name}`),
        rejected: policies.rejected,
        floor: policies.floor,
        problems: policies.problems,
      },
      providers: deps.overflow.state(),
      budget: deps.overflow.budgetLedger(),
      admission: requestPath.admission.states(requestPath.deps.now()),
      gossip: deps.gossip?.stats(),
      peerPodsRejected: deps.gossip?.rejected ?? [],
    };
  };
  const explain: AdminDeps['explain'] = (q) => {
    const who = callers.named(q.namespace, q.tenant);
    const request: RouteRequest = {
      kind: 'chat',
      model: q.model,
      tenant: who.tenant,
      namespace: who.namespace,
      tags: q.tags,
      promptTokens: q.promptTokens,
      stream: true,
    };
    const policy = callers.policyFor(who, q.model);
    return { ...explainDecision(requestPath.explain(request, who), policy), ...budgetAndWaiting(who.tenant, policy) };
  };
  /** The tenant's overflow budget per limit, and how many wait for a pod now by class. */
  const budgetAndWaiting = (tenant: string, policy: EffectivePolicy) => {
    const budget = deps.overflow.budgetState(tenant, policy);
    return {
      ...(budget ? { budget } : {}),
      waiting: requestPath.waiting.depth().byPriority,
      admission: requestPath.admission.state(policy.name, policy.sloAttainment, requestPath.deps.now()),
    };
  };
  const explainBody = (q: ExplainBodyQuery) => {
    const parsed = parseInferenceRequest(q.kind, q.body);
    if (!deps.isKnownModel(parsed.model))
      throw new RequestError(404, `The model \`${parsed.model}\` does not exist.`, 'model', 'model_not_found');
    const who: Identity =
      q.ip !== undefined ? callers.identityOf(q.tenant ?? null, q.ip) : callers.named(q.namespace, q.tenant);
    const c = callers.classify(q.tags, parsed.body, q.forwardedHeaders);
    const decision = requestPath.explain(requestPath.routeRequest(parsed, who, c.tags), who);
    const policy = callers.policyFor(who, parsed.model);
    return {
      ...explainDecision(decision, policy),
      ...budgetAndWaiting(who.tenant, policy),
      caller: {
        namespace: who.namespace,
        tenant: who.tenant,
        ...(who.unidentified ? { unidentified: who.unidentified.reason } : {}),
      },
      classification: {
        tags: c.tags,
        findings: c.findings,
        unscanned: c.unscanned,
        rejectedHeaderTags: c.rejectedHeaderTags,
      },
    };
  };
  return { readiness, state, explain, explainBody };
}

/** Ready when discovery synced, every local pod was scraped once, gossip heard a peer (if any), not draining. */
function readinessOf(deps: AdminViewsDeps): Readiness {
  const { pool } = deps;
  const status = deps.discovery.status();
  const unscraped = pool
    .localPods()
    .filter((p) => (deps.scraper.health(p.uid)?.scrapes ?? 0) === 0)
    .map((p) => p.name);
  const checks = {
    discovery: {
      ok: status.synced,
      detail: status.connected ? 'connected' : `serving the last known view: ${status.lastError ?? 'disconnected'}`,
    },
    firstScrape: {
      ok: unscraped.length === 0,
      detail: unscraped.length ? `not yet scraped: ${unscraped.join(', ')}` : undefined,
    },
    gossip: deps.gossip?.readiness(deps.peers().length > 0) ?? { ok: true },
    draining: { ok: !deps.draining() },
  };
  return { ready: Object.values(checks).every((c) => c.ok), checks };
}

/** Requests handled so far, in all and by route, read from the requests counter. */
async function requestsByRoute(metrics: AdminViewsDeps['metrics']) {
  const byRoute: Record<string, number> = {};
  let total = 0;
  for (const v of (await metrics.requests.get()).values) {
    total += v.value;
    const route = String(v.labels.route);
    byRoute[route] = (byRoute[route] ?? 0) + v.value;
  }
  return { total, byRoute };
}
