// The composition root: builds the pure core and the shells from settings, wires them, and
// starts the two listeners. Nothing here decides anything; it only connects parts.
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { serve } from '@hono/node-server';
import type { AgentSettings } from './config/load.ts';
import { resolveSecret } from './config/secrets.ts';
import { createStaticDiscovery } from './cluster/static.ts';
import type { ClusterSnapshot, Discovery } from './cluster/types.ts';
import { peerPodScreen } from './cluster/peer-pods.ts';
import { classifyRequest, UNSCANNED_TAG, type Classification } from './classify/classify.ts';
import { compileDetectors, type CustomDetector, type DetectorSpec } from './classify/custom.ts';
import { createPodDispatcher } from './forward/pod.ts';
import { credentialFor } from './forward/headers.ts';
import { randomUUID } from 'node:crypto';
import { registerGossipMetrics } from './gossip/metrics.ts';
import { GossipNode, parseHostPort } from './gossip/node.ts';
import { loadPolicies, MAX_EXCLUDE_WINDOW_MS } from './policy/schema.ts';
import { compilePolicies, mayLeave, type CompiledPolicies } from './policy/resolve.ts';
import { PodPool } from './pool/pool.ts';
import { BreakerSet, createProvider, tryProviders, type ClosableProvider } from './providers/index.ts';
import { createAdminApp, type ExplainBodyQuery, type Readiness } from './server/admin.ts';
import { parseInferenceRequest, RequestError } from './server/request.ts';
import { createApiApp } from './server/api.ts';
import type { LeaveVerdict } from './route/router.ts';
import { explainDecision } from './server/explain.ts';
import { identify, restrictUnidentified, type Identity } from './server/identify.ts';
import { RequestPath, withHeaders } from './server/inference.ts';
import { createMetrics } from './server/metrics.ts';
import { FailureLog } from './telemetry/failure-log.ts';
import { Scraper } from './telemetry/scraper.ts';
import type { EffectivePolicy, RouteRequest } from './types.ts';

export interface AgentDeps {
  /** Replaces the discovery the settings name (tests, Kubernetes mode built by the CLI). */
  discovery?: Discovery;
  /** Static mode: watch this config file for policy and pod changes. */
  configPath?: string;
  now?: () => number;
  rand?: () => number;
  log?: (level: 'info' | 'warn' | 'error', message: string) => void;
  /** Where sampled per-request JSON lines go (default: stdout). */
  requestLog?: (line: string) => void;
}

export interface RunningAgent {
  apiUrl: string;
  adminUrl: string;
  gossipAddress?: string;
  pool: PodPool;
  /** Stop taking requests, let in-flight ones finish (up to the drain timeout), then close. */
  shutdown(): Promise<void>;
}

function listen(app: { fetch: (req: Request) => Response | Promise<Response> }, hostPort: string): Promise<Server> {
  const { host: hostname, port } = parseHostPort(hostPort);
  return new Promise((resolve, reject) => {
    const server = serve({ fetch: app.fetch, hostname, port }, () => resolve(server as Server)) as Server;
    server.once('error', reject);
  });
}

function urlOf(server: Server): string {
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `http://${host}:${address.port}`;
}

const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;

/** After the drain deadline, how long the closing error events get to reach their clients. */
const DRAIN_FLUSH_MS = 1_000;

export async function startAgent(settings: AgentSettings, deps: AgentDeps = {}): Promise<RunningAgent> {
  const now = deps.now ?? (() => performance.timeOrigin + performance.now());
  const rand = deps.rand ?? Math.random;
  const threshold = LOG_LEVELS.indexOf(settings.logLevel);
  const log =
    deps.log ??
    ((level: 'info' | 'warn' | 'error', message: string) => {
      if (LOG_LEVELS.indexOf(level) >= threshold) console[level === 'info' ? 'log' : level](`kinference: ${message}`);
    });
  const pool = new PodPool({
    node: settings.node,
    scrapeIntervalMs: settings.scrapeIntervalMs,
    peerMaxAgeMs: settings.gossip?.ttlMs ?? 3000,
    networkCostMs: settings.gossip?.networkCostMs ?? 2,
    referenceWindowMs: 30_000,
    failureCooldownMs: 1000,
    maxInFlightPerPod: settings.limits.maxConnectionsPerPod,
    now,
  });
  const metrics = createMetrics({
    defaultMetrics: true,
    podPredictions: () => {
      const { local, remote } = pool.debugState();
      return [
        ...local.map((p) => ({ pod: p.pod.name, where: 'local' as const, seconds: (p.predictedTtftMs ?? NaN) / 1000 })),
        ...remote.map((p) => ({ pod: `${p.pod.node}/${p.pod.name}`, where: 'peer' as const, seconds: (p.predictedTtftMs ?? NaN) / 1000 })),
      ];
    },
    discoveryConnected: () => discovery.status().connected,
  });

  const discovery =
    deps.discovery ??
    (settings.discovery === 'kubernetes'
      ? (await import('./cluster/kubernetes.ts')).createKubernetesDiscovery({
          nodeName: settings.node,
          ...settings.kubernetes,
          gossipPort: settings.gossip ? parseHostPort(settings.gossip.bind).port : undefined,
          log: (level: 'info' | 'warn', message: string) => log(level, message),
        })
      : createStaticDiscovery({
          settings,
          configPath: deps.configPath,
          onReload: (outcome, detail) => {
            metrics.policyReloads.inc({ outcome });
            if (outcome === 'ok') log('info', 'config reloaded');
            else log('warn', `config change rejected, keeping the previous one: ${detail}`);
          },
        }));

  const scrapeFailures = new FailureLog(settings.limits.scrapeFailureLogIntervalMs);
  const scraper = new Scraper(
    // Windows cover the longest exclusion window a policy may name, at 1 s resolution.
    { intervalMs: settings.scrapeIntervalMs, timeoutMs: settings.limits.scrapeTimeoutMs, now, windows: { spanMs: MAX_EXCLUDE_WINDOW_MS, bucketMs: 1000 } },
    (pod, load, telemetry) => {
      metrics.scrapes.inc({ outcome: 'ok' });
      scrapeFailures.forget(pod.uid);
      pool.recordLoad(pod.uid, load, telemetry);
    },
    (pod, error, kind) => {
      metrics.scrapes.inc({ outcome: kind === 'implausible' ? 'implausible' : 'error' });
      const line = scrapeFailures.line(pod.uid, `scrape of pod ${pod.namespace}/${pod.name} (${pod.address}) failed: ${error}`, now());
      if (line !== undefined) log('warn', line);
      pool.recordScrapeFailure(pod.uid, kind === 'implausible' ? error : undefined);
    },
  );

  // --- what changes with discovery: pods, policies, providers, peers -------------------------
  let snapshot: ClusterSnapshot = { pods: [], namespaces: new Map(), policies: [], providers: [], peers: [], callers: new Map() };
  let policies: CompiledPolicies = compilePolicies([]);
  let providers = new Map<string, ClosableProvider>();
  const breakers = new BreakerSet();
  let gossip: GossipNode | undefined;

  const applySnapshot = () => {
    const next = discovery.snapshot();
    pool.setLocalPods(next.pods);
    scraper.setPods(next.pods);
    if (next.policies !== snapshot.policies || next.namespaces !== snapshot.namespaces) {
      const loaded = loadPolicies(next.policies);
      for (const e of loaded.errors) log('warn', `policy ${e.name} ignored: ${e.errors.map((x) => `${x.path}: ${x.message}`).join('; ')}`);
      policies = compilePolicies(loaded.policies, next.namespaces);
      if (loaded.errors.length > 0) metrics.policiesRejected.inc({ reason: 'invalid' }, loaded.errors.length);
      if (policies.rejected.length > 0) metrics.policiesRejected.inc({ reason: 'guardrail' }, policies.rejected.length);
      for (const problem of policies.problems) log('warn', `policy: ${problem}`);
    }
    if (next.providers !== snapshot.providers) {
      const old = providers;
      const limits = { maxBodyBytes: settings.limits.maxUpstreamBodyBytes, idleTimeoutMs: settings.limits.providerIdleTimeoutMs };
      providers = new Map(next.providers.map((p) => [p.name, createProvider(p, { limits })]));
      for (const p of old.values()) void p.close().catch(() => {});
    }
    gossip?.setPeers(next.peers);
    const rescreen = next.peerPods !== snapshot.peerPods;
    // Validated with the rest of the file (a bad detector rejects the reload), so this compiles clean.
    if (next.detectors && next.detectors !== snapshot.detectors) setDetectors(next.detectors);
    snapshot = next;
    if (rescreen) {
      screen = peerPodScreen(next.peerPods);
      screenPeers();
    }
  };
  let detectors: CustomDetector[] = [];
  let detectorTags = new Map<string, string>();
  const setDetectors = (specs: DetectorSpec[]) => {
    detectors = compileDetectors(specs).detectors;
    detectorTags = new Map(detectors.map((d) => [d.name, d.tag]));
  };
  setDetectors(settings.detectors);
  // Gossiped pods become candidates only when the cluster vouches for them (agent/cluster/peer-pods.ts).
  let screen = peerPodScreen(undefined);
  let rejectedPeers: ReturnType<typeof screen>['rejected'] = [];
  const countedRejections = new Set<string>();
  const screenPeers = () => {
    if (!gossip) return;
    const estimates = gossip.remoteEstimates();
    const { accepted, rejected } = screen(estimates);
    for (const r of rejected) {
      // Counted once per pod, address and reason, not on every gossip round that repeats it.
      const key = `${r.uid}\u0000${r.address}\u0000${r.reason}`;
      if (countedRejections.has(key)) continue;
      if (countedRejections.size >= 10_000) countedRejections.clear();
      countedRejections.add(key);
      metrics.peerPodsRejected.inc({ reason: r.reason });
      log('warn', `gossiped pod ${r.uid} at ${r.address} from ${r.origin} is not routable: ${r.reason}`);
    }
    rejectedPeers = rejected;
    pool.setRemote(accepted);
  };
  await discovery.start();
  applySnapshot();
  discovery.onChange(applySnapshot);
  scraper.start();

  if (settings.gossip) {
    gossip = new GossipNode({
      nodeId: settings.node,
      bind: settings.gossip.bind,
      peers: snapshot.peers,
      key: Buffer.from(resolveSecret(settings.gossip.key)),
      intervalMs: settings.gossip.intervalMs,
      fanout: settings.gossip.fanout,
      ttlMs: settings.gossip.ttlMs,
      now,
      rand,
    });
    gossip.onChange(screenPeers);
    registerGossipMetrics(metrics.registry, gossip);
    await gossip.start();
  }
  // Publish our pods' estimates once per gossip round (cheap: the state machine only sends deltas).
  const publishTimer = gossip
    ? setInterval(() => gossip!.publishLocal(pool.localEstimates()), settings.gossip!.intervalMs)
    : undefined;
  publishTimer?.unref();

  // --- the request path -------------------------------------------------------------------------
  const isKnownModel = (model: string) => pool.servedModels().has(model) || [...providers.values()].some((p) => p.models.includes(model));
  const knownModels = () => [...new Set([...pool.servedModels(), ...[...providers.values()].flatMap((p) => p.models)])].sort();
  const leaveVerdict = (policy: EffectivePolicy, request: RouteRequest): LeaveVerdict => {
    const verdict = mayLeave(policy, request);
    if (!verdict.allowed) return { ...verdict, providers: [] };
    const at = now();
    const serving = policy.overflow.providers.filter((name) => providers.get(name)?.supports(request.kind, request.model));
    if (serving.length === 0) {
      // Say why when the policy's providers can never take this kind of request (Bedrock and
      // /v1/responses), rather than "may overflow" on a request that then gets 429.
      const refusals = policy.overflow.providers.map((name) => providers.get(name)?.refusal?.(request.kind)).filter((r): r is string => r !== undefined);
      if (refusals.length > 0 && refusals.length === policy.overflow.providers.length) return { allowed: false, reason: refusals.join('; '), providers: [] };
      return { ...verdict, providers: [] };
    }
    const usable = serving.filter((name) => breakers.get(name).state(at) !== 'open');
    if (usable.length > 0) return { ...verdict, providers: usable };
    const breakersOpenMs = Math.min(...serving.map((name) => breakers.get(name).retryInMs(at)));
    return { ...verdict, reason: `${verdict.reason}, but every provider's circuit breaker is open`, providers: [], breakersOpenMs };
  };
  const trustTenantHeader = settings.discovery === 'static' || settings.tenantHeaderExplicit;
  const identityOf = (headerTenant: string | null, remoteIp: string | undefined): Identity => {
    const claim = identify({ trustTenantHeader, headerTenant, remoteIp, callers: snapshot.callers });
    if (claim.unidentified) return { namespace: claim.namespace, tenant: claim.namespace, unidentified: claim.unidentified };
    return { namespace: claim.namespace, tenant: policies.tenantFor(claim.namespace, claim.claimedTenant) };
  };
  const identity = (req: Request, remoteIp: string | undefined) => {
    const who = identityOf(req.headers.get(settings.tenantHeader), remoteIp);
    if (who.unidentified) metrics.unidentified.inc({ reason: who.unidentified.code });
    return who;
  };
  const policyFor = (who: Identity, model: string) => {
    const policy = policies.resolve(who.tenant, who.namespace, model);
    return who.unidentified && !policies.floor.unidentifiedMayLeave ? restrictUnidentified(policy) : policy;
  };
  const scanLimits = { maxDepth: settings.limits.classifyMaxDepth, maxChars: settings.limits.classifyMaxChars, maxNodes: settings.limits.classifyMaxValues };
  const classifyBody = (headerTags: string | null, body: unknown): Classification => classifyRequest(headerTags, body, { limits: scanLimits, detectors });
  const classifyCounted = (headerTags: string | null, body: unknown): string[] => {
    const c = classifyBody(headerTags, body);
    for (const d of c.detectors) metrics.classified.inc({ detector: d, tag: 'pii' });
    for (const name of c.custom) metrics.classified.inc({ detector: name, tag: detectorTags.get(name) ?? '' });
    if (c.unscanned.length > 0) metrics.classified.inc({ detector: UNSCANNED_TAG, tag: UNSCANNED_TAG });
    return c.tags;
  };
  const dispatcher = createPodDispatcher(settings.limits.maxConnectionsPerPod);
  const requestPath = new RequestPath({
    metrics,
    dispatcher,
    limits: {
      maxBodyBytes: settings.limits.maxBodyBytes,
      maxRetries: settings.limits.maxRetries,
      maxWaiting: settings.limits.maxWaiting,
      maxLabelValues: settings.limits.maxLabelValues,
      maxJsonDepth: settings.limits.maxJsonDepth,
      maxUpstreamBodyBytes: settings.limits.maxUpstreamBodyBytes,
      pod: { connectMs: settings.limits.podConnectTimeoutMs, responseMs: settings.limits.podResponseTimeoutMs, idleMs: settings.limits.podIdleTimeoutMs },
    },
    now,
    rand,
    newRequestId: randomUUID,
    requestLog: { sample: settings.requestLogSample, write: deps.requestLog ?? ((line) => process.stdout.write(`${line}\n`)) },
    podAuth: (pod): Record<string, string> => {
      const key = credentialFor(pod, settings.podCredentials);
      if (!key) return {};
      try {
        return { authorization: `Bearer ${resolveSecret(key)}` };
      } catch (error) {
        // Sent without a key, the pod answers 401, which fails over to another pod and says why.
        log('warn', `pod ${pod.namespace}/${pod.name}: ${(error as Error).message}`);
        return {};
      }
    },
    identify: identity,
    classify: classifyCounted,
    isKnownModel,
    policyFor,
    leaveVerdict,
    pool,
    overflow: async (request, parsed, names, signal, headers) => {
      const chain = names.map((n) => providers.get(n)).filter((p): p is ClosableProvider => p !== undefined);
      const result = await tryProviders(chain, { kind: request.kind, model: request.model, body: parsed.body, signal, headers }, {
        breakers,
        now,
        onAttempt: (a) => metrics.providerRequests.inc({ provider: a.provider, outcome: a.outcome === 'answered' ? (a.status && a.status >= 400 ? 'client_error' : 'ok') : a.outcome }),
      });
      if (result.ok) return { ok: true, response: withHeaders(result.response, { 'x-kinference-route': `overflow/${result.provider}` }) };
      const summary = result.attempts.map((a) => `${a.provider}: ${a.outcome}${a.reason ? ` (${a.reason}${a.status ? ` ${a.status}` : ''})` : ''}${a.message ? `: ${a.message}` : ''}`).join(', ');
      log('warn', `overflow failed: ${summary}`);
      // Reached and answered badly (5xx, garbage) is a bad gateway; reached none is unavailability.
      const answered = result.attempts.some((a) => a.outcome === 'failed' && (a.reason === 'status' || a.reason === 'protocol'));
      return { ok: false, status: answered ? 502 : 503, message: `every overflow provider failed (${summary})` };
    },
  });

  // --- listeners ---------------------------------------------------------------------------------
  let draining = false;
  const api = await listen(createApiApp({ requestPath, models: knownModels, accepting: () => !draining }), settings.listen.api);
  let active = 0;
  const drained: (() => void)[] = [];
  api.on('request', (_req, res) => {
    active++;
    res.once('close', () => {
      active--;
      if (active === 0) for (const done of drained.splice(0)) done();
    });
  });

  // A new agent (a rollout's surge) is ready once it has heard a peer, so it routes with the
  // cluster's view from its first request; alone in the cluster, one TTL of silence is enough.
  const startedAt = now();
  const gossipReadiness = () => {
    if (!gossip || snapshot.peers.length === 0) return { ok: true };
    const heard = gossip.stats().received.datagrams > 0;
    return heard || now() - startedAt >= settings.gossip!.ttlMs ? { ok: true } : { ok: false, detail: 'no gossip heard yet' };
  };
  const readiness = (): Readiness => {
    const status = discovery.status();
    const unscraped = pool.localPods().filter((p) => (scraper.health(p.uid)?.scrapes ?? 0) === 0).map((p) => p.name);
    const checks = {
      discovery: { ok: status.synced, detail: status.connected ? 'connected' : `serving the last known view: ${status.lastError ?? 'disconnected'}` },
      firstScrape: { ok: unscraped.length === 0, detail: unscraped.length ? `not yet scraped: ${unscraped.join(', ')}` : undefined },
      gossip: gossipReadiness(),
      draining: { ok: !draining },
    };
    return { ready: Object.values(checks).every((c) => c.ok), checks };
  };
  const explain = (q: { model: string; tenant?: string; namespace?: string; tags: string[]; promptTokens: number }) => {
    const namespace = q.namespace ?? q.tenant ?? 'default';
    const who = { namespace, tenant: policies.tenantFor(namespace, q.tenant) };
    const request: RouteRequest = { kind: 'chat', model: q.model, tenant: who.tenant, namespace, tags: q.tags, promptTokens: q.promptTokens, stream: true };
    return explainDecision(requestPath.explain(request, who), requestPath.deps.policyFor(who, q.model));
  };
  const state = async () => {
    const at = now();
    const pods = pool.debugState();
    return {
      node: settings.node,
      ready: readiness().ready,
      discovery: { mode: settings.discovery, ...discovery.status() },
      requests: await requestSummary(),
      pods,
      policies: {
        loaded: policies.policies.map((p) => `${p.metadata.namespace}/${p.metadata.name}`),
        rejected: policies.rejected,
        floor: policies.floor,
        problems: policies.problems,
      },
      providers: [...providers.values()].map((p) => ({ name: p.name, kind: p.kind, models: p.models, breaker: breakers.get(p.name).snapshot(at) })),
      gossip: gossip?.stats(),
      peerPodsRejected: rejectedPeers,
    };
  };
  const requestSummary = async () => {
    const byRoute: Record<string, number> = {};
    let total = 0;
    for (const v of (await metrics.requests.get()).values) {
      total += v.value;
      const route = String(v.labels.route);
      byRoute[route] = (byRoute[route] ?? 0) + v.value;
    }
    return { total, byRoute };
  };
  const explainBody = (q: ExplainBodyQuery) => {
    const parsed = parseInferenceRequest(q.kind, q.body);
    if (!isKnownModel(parsed.model)) throw new RequestError(404, `The model \`${parsed.model}\` does not exist.`, 'model', 'model_not_found');
    let who: Identity;
    if (q.ip !== undefined) who = identityOf(q.tenant ?? null, q.ip);
    else {
      const namespace = q.namespace ?? q.tenant ?? 'default';
      who = { namespace, tenant: policies.tenantFor(namespace, q.tenant) };
    }
    const c = classifyBody(q.tags, parsed.body);
    const decision = requestPath.explain(requestPath.routeRequest(parsed, who, c.tags), who);
    return {
      ...explainDecision(decision, requestPath.deps.policyFor(who, parsed.model)),
      caller: { namespace: who.namespace, tenant: who.tenant, ...(who.unidentified ? { unidentified: who.unidentified.reason } : {}) },
      classification: { tags: c.tags, findings: c.findings, unscanned: c.unscanned, rejectedHeaderTags: c.rejectedHeaderTags },
    };
  };
  const admin = await listen(
    createAdminApp({ metrics, readiness, state, explain, explainBody, isKnownModel, maxBodyBytes: settings.limits.maxBodyBytes }),
    settings.listen.admin,
  );

  log('info', `node ${settings.node}: API ${urlOf(api)}, admin ${urlOf(admin)}${settings.gossip ? `, gossip udp ${settings.gossip.bind}` : ''}`);

  let shutdownPromise: Promise<void> | undefined;
  const shutdown = () =>
    (shutdownPromise ??= (async () => {
      draining = true;
      // Stop accepting; idle keep-alive connections close now, busy ones after their response.
      api.close();
      api.closeIdleConnections();
      const untilDrained = (ms: number) =>
        new Promise<void>((resolve) => {
          if (active === 0) return resolve();
          const timer = setTimeout(resolve, ms);
          drained.push(() => {
            clearTimeout(timer);
            resolve();
          });
        });
      await untilDrained(settings.limits.drainTimeoutMs);
      if (active > 0) {
        // Past the deadline: streams end with an error event and [DONE] rather than a cut socket,
        // given a moment to reach their clients.
        requestPath.endStreams();
        await untilDrained(DRAIN_FLUSH_MS);
      }
      api.closeAllConnections();
      clearInterval(publishTimer);
      await gossip?.stop();
      await scraper.stop();
      await discovery.stop();
      await Promise.all([...providers.values()].map((p) => p.close().catch(() => {})));
      await dispatcher.close().catch(() => {});
      await new Promise<void>((resolve) => admin.close(() => resolve()));
      admin.closeAllConnections();
    })());

  return { apiUrl: urlOf(api), adminUrl: urlOf(admin), gossipAddress: settings.gossip?.bind, pool, shutdown };
}
