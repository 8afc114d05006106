// The composition root: each shell builds its own part from settings, and this file connects
// them and starts the two listeners. Nothing here decides anything; it only connects parts.
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import type { AgentSettings } from './config/load.ts';
import { discoveryFor } from './cluster/discovery.ts';
import type { ClusterSnapshot, Discovery } from './cluster/types.ts';
import type { ClockAndRandom, Pod } from './types.ts';
import { gossipFor, type GossipLink } from './gossip/link.ts';
import { parseHostPort } from './gossip/node.ts';
import { MAX_EXCLUDE_WINDOW_MS } from './policy/schema.ts';
import { PodPool } from './pool/pool.ts';
import { overflowFor, type Overflow } from './providers/overflow.ts';
import { BudgetLedger } from './budget/ledger.ts';
import { OverflowBudget } from './budget/spend.ts';
import { BudgetExchange } from './budget/exchange.ts';
import { createAdminHandler, type AdminHandler } from './server/admin/admin.ts';
import { adminViews, type AdminViewsDeps } from './server/admin/admin-views.ts';
import { createApiHandler } from './server/listener/api.ts';
import { listenApi } from './server/listener/listener.ts';
import { Callers } from './server/request-path/caller.ts';
import { Drain } from './server/listener/drain.ts';
import { memoryRelease, startIdleRelease } from './memory/idle-release.ts';
import { requestPathFor, type RequestPath } from './server/request-path/inference.ts';
import { createMetrics, podPredictionsOf, type Metrics } from './server/observability/metrics.ts';
import { scraperFeedingPool } from './telemetry/pool-feed.ts';
import { startPodProbes } from './forward/pod-probe.ts';
import type { Scraper } from './telemetry/scraper.ts';
import { traceExportFor } from './telemetry/trace-export.ts';
import { AdapterListing } from './telemetry/adapter-listing.ts';
import { kvEventsFor } from './telemetry/kv-events-for.ts';
import { podAuthFrom } from './forward/pod.ts';
import type { Tracer } from '@opentelemetry/api';

export interface AgentDeps extends ClockAndRandom {
  /** Replaces the discovery the settings name (tests, Kubernetes mode built by the CLI). */
  discovery?: Discovery;
  /** Static mode: watch this config file for policy and pod changes. */
  configPath?: string;
  log?: (level: 'info' | 'warn' | 'error', message: string) => void;
  /** Where sampled per-request JSON lines go (default: stdout). */
  requestLog?: (line: string) => void;
  /** Spans go here instead of the configured OTLP export (tests: an in-memory exporter). */
  tracer?: Tracer;
}

export interface RunningAgent {
  apiUrl: string;
  adminUrl: string;
  gossipAddress?: string;
  pool: PodPool;
  /** Stop taking requests, let in-flight ones finish (up to the drain timeout), then close. */
  shutdown(): Promise<void>;
}

// node:http as its CommonJS module, not an ES import: an ES import of a built-in reads every export
// to build its namespace, and node:http's WebSocket, CloseEvent and MessageEvent getters then load
// Node's bundled undici (fetch, WebSocket, web Request/Response): 2.3 MB of heap for the process's
// life that nothing here uses (docs/benchmarks.md, "Memory").
const { createServer } = process.getBuiltinModule('node:http');

/** Serves a node:http handler (the admin listener's) on `hostPort`. */
function listen(handler: AdminHandler, hostPort: string): Promise<Server> {
  const { host: hostname, port } = parseHostPort(hostPort);
  return new Promise((resolve, reject) => {
    const server = createServer(handler).listen(port, hostname, () => resolve(server));
    server.once('error', reject);
  });
}

function urlOf(server: Server): string {
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `http://${host}:${address.port}`;
}

/** Where others reach our API: the bound address, and on a wildcard our advertised gossip host. */
function agentApiAddresses(bound: AddressInfo, advertise: string | undefined): string[] {
  const out = [apiHostPort(bound.address, bound.port)];
  if (advertise && (bound.address === '0.0.0.0' || bound.address === '::'))
    out.push(apiHostPort(parseHostPort(advertise).host, bound.port));
  return out;
}

const apiHostPort = (host: string, port: number): string =>
  host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;

const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
type Log = (level: 'info' | 'warn' | 'error', message: string) => void;

function consoleLog(settings: AgentSettings): Log {
  const threshold = LOG_LEVELS.indexOf(settings.logLevel);
  return (level, message) => {
    if (LOG_LEVELS.indexOf(level) >= threshold) console[level === 'info' ? 'log' : level](`kinference: ${message}`);
  };
}

function poolFor(settings: AgentSettings, now: () => number): PodPool {
  return new PodPool({
    node: settings.node,
    scrapeIntervalMs: settings.scrapeIntervalMs,
    scrapeTimeoutMs: settings.limits.scrapeTimeoutMs,
    peerMaxAgeMs: settings.gossip?.ttlMs ?? 3000,
    networkCostMs: settings.gossip?.networkCostMs ?? 2,
    referenceWindowMs: 30_000,
    ejection: { baseMs: settings.limits.ejectionBaseMs, maxMs: settings.limits.ejectionMaxMs },
    maxInFlightPerPod: settings.limits.maxConnectionsPerPod,
    peerShortlist: settings.limits.peerShortlist,
    leavableBatchReserve: settings.limits.leavableBatchReserve,
    prefixBlocksPerPod: settings.limits.prefixBlocksPerPod,
    loraCosts: { loadMs: settings.limits.loraLoadMs, slotWaitMs: settings.limits.loraSlotWaitMs },
    now,
  });
}

/**
 * Every start is a new ledger origin, named after this start's gossip origin instance (see
 * agent/budget/ledger.ts: restarts neither reset nor double-count). With gossip, the counters ride
 * on it (agent/budget/exchange.ts) and the ledger is synced once peers answered in full; without
 * gossip there is no cluster to hear, and it enforces on its own count.
 */
function overflowBudgetFor(
  settings: AgentSettings,
  clock: { now: () => number; rand: () => number },
  incarnation: number,
): { budget: OverflowBudget; exchange?: BudgetExchange } {
  let exchange: BudgetExchange | undefined;
  const ledger = new BudgetLedger({
    origin: `${settings.node}#${incarnation}`,
    // A change reaches every agent within a few gossip rounds (bench:gossip); a share is measured over this.
    convergenceMs: Math.max(1000, 5 * (settings.gossip?.intervalMs ?? 200)),
    ...clock,
    agents: () => exchange?.agents ?? 1,
    ...(settings.gossip ? { sweeps: () => exchange!.sweeps } : {}),
    warmupMs: settings.limits.budgetWarmupMs,
    pendingTtlMs: settings.limits.budgetPendingTtlMs,
    maxCounters: settings.limits.budgetMaxCounters,
    maxOrigins: settings.limits.budgetMaxOrigins,
  });
  // Counters signed by their origin with its gossip key (agent/budget/signing.ts).
  if (settings.gossip) exchange = new BudgetExchange({ ledger, maxMessagesPerAnswer: 4, signed: true });
  else ledger.markSynced();
  const budget = new OverflowBudget({
    ledger,
    completionEstimate: settings.limits.budgetCompletionEstimate,
    maxUsageBodyBytes: settings.limits.maxUpstreamBodyBytes,
    maxShownTenants: settings.limits.maxLabelValues,
  });
  return { budget, exchange };
}

/** Applies each discovery snapshot to the parts it feeds: pods, policies, providers, peers, callers, detectors. */
function followDiscovery(
  discovery: Discovery,
  parts: {
    pool: PodPool;
    scraper: Scraper;
    callers: Callers;
    overflow: Overflow;
    gossip?: GossipLink;
    kv?: { setPods(pods: readonly Pod[]): void };
    listing?: AdapterListing;
  },
): { peers(): ClusterSnapshot['peers']; relist(): void } {
  const { pool, scraper, callers, overflow, gossip, kv, listing } = parts;
  let snapshot: ClusterSnapshot = {
    pods: [],
    namespaces: new Map(),
    policies: [],
    providers: [],
    peers: [],
    callers: new Map(),
  };
  const apply = () => {
    const next = discovery.snapshot();
    // With the adapters the pods' own model lists name (agent/telemetry/adapter-listing.ts).
    pool.setLocalPods(listing ? listing.withListed(next.pods) : next.pods);
    listing?.setPods(next.pods);
    scraper.setPods(next.pods);
    kv?.setPods(next.pods);
    if (next.policies !== snapshot.policies || next.namespaces !== snapshot.namespaces)
      callers.setPolicies(next.policies, next.namespaces);
    callers.setCallers(next.callers);
    overflow.setProviders(next.providers);
    gossip?.setPeers(next.peers, next.gossipMembers);
    if (next.detectors && next.detectors !== snapshot.detectors) callers.setDetectors(next.detectors);
    const rescreen = next.peerPods !== snapshot.peerPods;
    snapshot = next;
    if (rescreen) gossip?.setPeerPodRules(next.peerPods);
  };
  apply();
  discovery.onChange(apply);
  return { peers: () => snapshot.peers, relist: () => listing && pool.setLocalPods(listing.withListed(snapshot.pods)) };
}

/** `run` on the first call; every later call gets the first call's promise. */
function once(run: () => Promise<void>): () => Promise<void> {
  let started: Promise<void> | undefined;
  return () => (started ??= run());
}

/** Tracing: the configured OTLP export (unless a tracer is given) and the request path's traces. */
async function tracesFor(settings: AgentSettings, given: Tracer | undefined) {
  const traceExport = given ? undefined : await traceExportFor(settings);
  const tracer = given ?? traceExport?.tracer;
  // Loaded only with a tracer: an agent without tracing never loads OpenTelemetry.
  const traces = tracer ? (await import('./server/observability/tracing.ts')).requestTraces(tracer) : undefined;
  return { traceExport, traces };
}

/** The API listener on `listen.api`, with the HTTP/1.1 bounds of `limits`. */
function startApi(settings: AgentSettings, handler: Parameters<typeof listenApi>[0]) {
  const { limits } = settings;
  const apiAt = parseHostPort(settings.listen.api);
  return listenApi(
    handler,
    {
      maxHeaderBytes: limits.apiMaxHeaderBytes,
      maxHeaders: limits.apiMaxHeaders,
      maxTargetBytes: limits.apiMaxTargetBytes,
      headersTimeoutMs: limits.apiHeadersTimeoutMs,
      requestTimeoutMs: limits.apiRequestTimeoutMs,
      keepAliveTimeoutMs: limits.apiKeepAliveTimeoutMs,
      maxRequestsPerSocket: limits.apiMaxRequestsPerSocket,
    },
    apiAt.port,
    apiAt.host,
  );
}

/** Gives memory back once the agent turns quiet (limits.releaseMemoryAfterIdle; 0: never). */
function idleReleaseFor(limits: AgentSettings['limits'], now: () => number, drain: Drain, released: () => void) {
  if (limits.releaseMemoryAfterIdleMs <= 0) return undefined;
  return startIdleRelease({
    quietMs: limits.releaseMemoryAfterIdleMs,
    now,
    received: () => drain.received,
    open: () => drain.active,
    release: memoryRelease(),
    released,
  });
}

/** The admin listener on `listen.admin`: /metrics, health, the state views and the dashboard. */
function startAdmin(
  settings: AgentSettings,
  parts: Omit<AdminViewsDeps, 'node' | 'discoveryMode' | 'metrics'> & { metrics: Metrics; log: Log },
): Promise<Server> {
  const { metrics, isKnownModel, log } = parts;
  const views = adminViews({ node: settings.node, discoveryMode: settings.discovery, ...parts });
  return listen(
    createAdminHandler(
      { metrics, ...views, isKnownModel, maxBodyBytes: settings.limits.maxBodyBytes, log },
      parseHostPort(settings.listen.admin).host,
    ),
    settings.listen.admin,
  );
}

/** Stops taking requests, lets in-flight ones finish (up to the drain timeout), then closes every part. */
async function stopAgent(
  limits: AgentSettings['limits'],
  parts: {
    idleRelease?: { stop(): void };
    drain: Drain;
    api: Parameters<Drain['drain']>[0];
    requestPath: RequestPath;
    stopPodProbes: () => void;
    listing?: { stop(): void };
    overflow: Overflow;
    traceExport?: { shutdown(): Promise<void> };
    admin: Server;
  },
  feeds: readonly ({ stop(): Promise<void> } | undefined)[],
): Promise<void> {
  const { idleRelease, drain, api, requestPath, stopPodProbes, listing, overflow, traceExport, admin } = parts;
  idleRelease?.stop();
  await drain.drain(api, limits.drainTimeoutMs, () => requestPath.endStreams());
  stopPodProbes();
  listing?.stop();
  for (const part of feeds) await part?.stop();
  await overflow.close();
  await traceExport?.shutdown().catch(() => {});
  await requestPath.deps.dispatcher.close().catch(() => {});
  await requestPath.deps.bodies?.close();
  await new Promise<void>((resolve) => admin.close(() => resolve()));
  admin.closeAllConnections();
}

/** Each local pod's /v1/models, read for its LoRA adapters (limits.adapterListInterval; 0: off). */
function adapterListingFor(settings: AgentSettings, log: Log, onChange: () => void): AdapterListing | undefined {
  const { limits } = settings;
  if (limits.adapterListIntervalMs <= 0) return undefined;
  return new AdapterListing({
    intervalMs: limits.adapterListIntervalMs,
    timeoutMs: limits.scrapeTimeoutMs,
    maxBodyBytes: 1024 * 1024,
    auth: podAuthFrom(settings.podCredentials, log),
    onChange,
  });
}

export async function startAgent(settings: AgentSettings, deps: AgentDeps = {}): Promise<RunningAgent> {
  // timeOrigin is fixed for the process, and its getter (brand check, native call) cost about
  // twice performance.now() itself: read once, not at each of a request's dozen clock reads.
  const timeOrigin = performance.timeOrigin;
  const now = deps.now ?? (() => timeOrigin + performance.now());
  const rand = deps.rand ?? Math.random;
  const log = deps.log ?? consoleLog(settings);
  const { limits } = settings;
  const pool = poolFor(settings, now);
  const metrics = createMetrics({
    defaultMetrics: true,
    podPredictions: () => podPredictionsOf(pool.predictions(limits.maxLabelValues), limits.maxLabelValues),
    discoveryConnected: () => discovery.status().connected,
    waiting: () => requestPath.waiting.depth(),
    budgetUsage: () => budget.usage(),
    budgetLedger: () => budget.ledgerState(),
    maxTenantLabels: limits.maxLabelValues,
    localPodStates: () => pool.localStates(),
    providerBreakers: () => overflow.state().map((p) => ({ provider: p.name, state: p.breaker.state })),
  });
  const discovery =
    deps.discovery ??
    (await discoveryFor(settings, { configPath: deps.configPath, reloads: metrics.policyReloads, log }));
  const scraper = scraperFeedingPool(settings, {
    now,
    scrapes: metrics.scrapes,
    log,
    pool,
    windowSpanMs: MAX_EXCLUDE_WINDOW_MS,
  });
  const callers = new Callers({ settings, metrics, log });
  const incarnation = Math.floor(now());
  const { budget, exchange: budgetExchange } = overflowBudgetFor(settings, { now, rand }, incarnation);
  const overflow = overflowFor(settings, { now, providerRequests: metrics.providerRequests, log, budget });
  const { registry, peerPodsRejected } = metrics;
  const gossipDeps = { now, rand, registry, peerPodsRejected, log, pool, incarnation, rider: budgetExchange };
  const gossip = gossipFor(settings, gossipDeps);
  if (gossip) pool.onPeerPodFailed((node) => gossip.suspect(node));

  const kv = await kvEventsFor(settings, pool, (message) => log('warn', message));
  await discovery.start();
  let relist = () => {};
  const listing = adapterListingFor(settings, log, () => relist());
  const discovered = followDiscovery(discovery, { pool, scraper, callers, overflow, gossip, kv, listing });
  relist = () => discovered.relist();
  scraper.start();
  await gossip?.start();
  const stopPodProbes = startPodProbes(pool, {
    intervalMs: 200,
    timeoutMs: Math.min(1_000, limits.podConnectTimeoutMs),
  });

  const { traceExport, traces } = await tracesFor(settings, deps.tracer);
  const isKnownModel = (model: string) => pool.servedModels().has(model) || overflow.serves(model);
  const knownModels = () => [...new Set([...pool.servedModels(), ...overflow.models()])].sort();
  const requestPath = requestPathFor(settings, {
    metrics,
    now,
    rand,
    log,
    writeLog: deps.requestLog,
    callers,
    overflow,
    pool,
    isKnownModel,
    ...(kv.promptTokenIds ? { promptTokenIds: kv.promptTokenIds } : {}),
    ...(traces ? { traces } : {}),
  });

  const drain = new Drain();
  const api = await startApi(
    settings,
    createApiHandler({
      requestPath,
      models: knownModels,
      ...(listing ? { parentOf: (model: string) => listing.baseOf(model) } : {}),
      accepting: () => !drain.draining,
      log,
    }),
  );
  drain.track(api);
  gossip?.addAgentApi(...agentApiAddresses(api.address() as AddressInfo, settings.gossip?.advertise));
  const idleRelease = idleReleaseFor(limits, now, drain, () => metrics.memoryReleases.inc());
  const draining = () => drain.draining;
  const parts = { discovery, peers: discovered.peers, pool, scraper, gossip, draining, callers, overflow };
  const admin = await startAdmin(settings, { ...parts, metrics, requestPath, isKnownModel, log });
  log(
    'info',
    `node ${settings.node}: API ${urlOf(api)}, admin ${urlOf(admin)}${settings.gossip ? `, gossip udp ${settings.gossip.bind}` : ''}`,
  );

  const stoppable = { idleRelease, drain, api, requestPath, stopPodProbes, listing, overflow, traceExport, admin };
  const shutdown = once(() => stopAgent(limits, stoppable, [gossip, scraper, discovery, kv]));

  return { apiUrl: urlOf(api), adminUrl: urlOf(admin), gossipAddress: settings.gossip?.bind, pool, shutdown };
}
