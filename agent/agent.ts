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
import { createAdminHandler, type AdminHandler } from './server/admin.ts';
import { adminViews } from './server/admin-views.ts';
import { createApiHandler } from './server/api.ts';
import { listenApi } from './server/listener.ts';
import { Callers } from './server/caller.ts';
import { Drain } from './server/drain.ts';
import { memoryRelease, startIdleRelease } from './memory/idle-release.ts';
import { requestPathFor } from './server/inference.ts';
import { createMetrics, podPredictionsOf } from './server/metrics.ts';
import { scraperFeedingPool } from './telemetry/pool-feed.ts';
import { startPodProbes } from './forward/pod-probe.ts';
import type { Scraper } from './telemetry/scraper.ts';
import { traceExportFor } from './telemetry/trace-export.ts';
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

/**
 * Precise prefix routing: subscribers to the KV events of the local pods that publish them, and
 * the configured models' tokenizers. The ZMQ binding and the tokenizers load only once a pod
 * publishes events or a tokenizer is configured: an agent without either pays nothing for them.
 */
async function kvEventsFor(
  settings: AgentSettings,
  pool: PodPool,
  log: (message: string) => void,
): Promise<{
  setPods(pods: readonly Pod[]): void;
  stop(): Promise<void>;
  promptTokenIds?: (model: string, body: Record<string, unknown>) => number[] | undefined;
}> {
  type Feeds = import('./telemetry/kv-feed.ts').KvEventFeeds;
  let feeds: Feeds | undefined;
  let loading: Promise<Feeds> | undefined;
  let latest: readonly Pod[] = [];
  const load = () =>
    (loading ??= import('./telemetry/kv-feed.ts').then(({ KvEventFeeds }) => {
      feeds = new KvEventFeeds({
        maxBlocksPerPod: settings.limits.preciseBlocksPerPod,
        replayTimeoutMs: settings.limits.kvReplayTimeoutMs,
        maxHeldBatches: settings.limits.kvMaxHeldBatches,
        log,
      });
      const f = feeds;
      pool.attachPreciseIndex(f.index, (uid) => f.synced(uid));
      f.setPods(latest);
      return f;
    }));
  const tokenizers =
    Object.keys(settings.tokenizers).length > 0
      ? (await import('./telemetry/kv-feed.ts')).loadTokenizers(settings.tokenizers, log)
      : undefined;
  return {
    setPods(pods) {
      latest = pods;
      if (feeds) feeds.setPods(pods);
      else if (pods.some((p) => p.kvEvents)) void load();
    },
    async stop() {
      await (feeds ?? (loading ? await loading : undefined))?.stop();
    },
    ...(tokenizers?.size
      ? {
          promptTokenIds: (model: string, body: Record<string, unknown>) => {
            // Only worth the tokenizing when some pod's events can answer; otherwise the approximate index does.
            if (!feeds) return undefined;
            return tokenizers.get(model)?.promptTokens(body);
          },
        }
      : {}),
  };
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
  },
): { peers(): ClusterSnapshot['peers'] } {
  const { pool, scraper, callers, overflow, gossip, kv } = parts;
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
    pool.setLocalPods(next.pods);
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
  return { peers: () => snapshot.peers };
}

/** `run` on the first call; every later call gets the first call's promise. */
function once(run: () => Promise<void>): () => Promise<void> {
  let started: Promise<void> | undefined;
  return () => (started ??= run());
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
  const discovered = followDiscovery(discovery, { pool, scraper, callers, overflow, gossip, kv });
  scraper.start();
  await gossip?.start();
  const stopPodProbes = startPodProbes(pool, {
    intervalMs: 200,
    timeoutMs: Math.min(1_000, limits.podConnectTimeoutMs),
  });

  const traceExport = deps.tracer ? undefined : await traceExportFor(settings);
  const tracer = deps.tracer ?? traceExport?.tracer;
  // Loaded only with a tracer: an agent without tracing never loads OpenTelemetry.
  const traces = tracer ? (await import('./server/tracing.ts')).requestTraces(tracer) : undefined;
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
  const apiAt = parseHostPort(settings.listen.api);
  const api = await listenApi(
    createApiHandler({ requestPath, models: knownModels, accepting: () => !drain.draining, log }),
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
  drain.track(api);
  gossip?.addAgentApi(...agentApiAddresses(api.address() as AddressInfo, settings.gossip?.advertise));
  const idleRelease =
    limits.releaseMemoryAfterIdleMs > 0
      ? startIdleRelease({
          quietMs: limits.releaseMemoryAfterIdleMs,
          now,
          received: () => drain.received,
          open: () => drain.active,
          release: memoryRelease(),
          released: () => metrics.memoryReleases.inc(),
        })
      : undefined;
  const views = adminViews({
    node: settings.node,
    discoveryMode: settings.discovery,
    discovery,
    peers: discovered.peers,
    pool,
    scraper,
    gossip,
    draining: () => drain.draining,
    callers,
    overflow,
    metrics,
    requestPath,
    isKnownModel,
  });
  const admin = await listen(
    createAdminHandler(
      { metrics, ...views, isKnownModel, maxBodyBytes: limits.maxBodyBytes, log },
      parseHostPort(settings.listen.admin).host,
    ),
    settings.listen.admin,
  );
  log(
    'info',
    `node ${settings.node}: API ${urlOf(api)}, admin ${urlOf(admin)}${settings.gossip ? `, gossip udp ${settings.gossip.bind}` : ''}`,
  );

  const shutdown = once(async () => {
    idleRelease?.stop();
    await drain.drain(api, limits.drainTimeoutMs, () => requestPath.endStreams());
    stopPodProbes();
    for (const part of [gossip, scraper, discovery, kv]) await part?.stop();
    await overflow.close();
    await traceExport?.shutdown().catch(() => {});
    await requestPath.deps.dispatcher.close().catch(() => {});
    await requestPath.deps.bodies?.close();
    await new Promise<void>((resolve) => admin.close(() => resolve()));
    admin.closeAllConnections();
  });

  return { apiUrl: urlOf(api), adminUrl: urlOf(admin), gossipAddress: settings.gossip?.bind, pool, shutdown };
}
