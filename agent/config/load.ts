// Reads and validates the agent's config file (at start, and again on each change in static
// mode), and turns it into typed settings with milliseconds and defaults. Errors name the key, what was expected and what was found.
import { DEFAULT_LORA_COSTS } from '../route/lora.ts';
import { DEFAULT_PEER_SHORTLIST } from '../pool/pool.ts';
import { readFileSync } from 'node:fs';
// Only the error iterator (`Value.Errors`): '@sinclair/typebox/value' loads every value operation.
import { Errors } from '@sinclair/typebox/errors';
import { parse as parseYaml } from 'yaml';
import type { Pod, SessionSettings } from '../types.ts';
import type { ProviderSettings } from '../providers/types.ts';
import { parseDuration } from '../../shared/duration.ts';
import type { SecretRef } from './secrets.ts';
import { loadPolicies } from '../policy/validate.ts';
import { compilePolicies } from '../policy/resolve.ts';
import { isIP } from 'node:net';
import { compileDetectors, type DetectorSpec } from '../classify/custom.ts';
import { cidrBlockList } from '../cluster/peer-pods.ts';
import { parseHostPort } from '../gossip/node.ts';
import { DEFAULT_TTL_MS } from '../gossip/state.ts';
import { hostPort } from '../cluster/kubernetes-snapshot.ts';
import { DEFAULT_SCAN_LIMITS } from '../classify/walk.ts';
import { DEFAULT_PREFIX_MAX_BLOCKS } from '../prefix/blocks.ts';
import { DEFAULT_MAX_BLOCKS_PER_POD } from '../prefix/index.ts';
import { AgentConfigSchema, type AgentConfigFile } from './schema.ts';
import { DEFAULT_LEDGER_LIMITS } from '../budget/ledger.ts';
import { providerListProblems, providerSettings } from './providers.ts';
import { dotPath } from '../../shared/json.ts';

export interface Limits {
  maxBodyBytes: number;
  podConnectTimeoutMs: number;
  podResponseTimeoutMs: number;
  podIdleTimeoutMs: number;
  maxRetries: number;
  /** A pod that failed before its first byte is out this long at first, doubling per repeat up to the max. */
  ejectionBaseMs: number;
  ejectionMaxMs: number;
  drainTimeoutMs: number;
  scrapeTimeoutMs: number;
  maxWaiting: number;
  peerShortlist: number;
  /** Completion tokens an overflow reserves against its tenant's budget when the client set no max_tokens. */
  budgetCompletionEstimate: number;
  /** The budget ledger's bounds and timings (agent/budget/ledger.ts). */
  budgetWarmupMs: number;
  budgetPendingTtlMs: number;
  budgetMaxCounters: number;
  budgetMaxOrigins: number;
  classifyMaxChars: number;
  classifyMaxDepth: number;
  classifyMaxValues: number;
  maxLabelValues: number;
  maxJsonDepth: number;
  /** Request bodies of at least this many bytes are parsed and classified on a worker thread. */
  offloadBodyBytes: number;
  /** Worker threads for large bodies (agent/server/body-offload.ts); 0: all on the event loop. */
  bodyWorkers: number;
  maxConnectionsPerPod: number;
  maxUpstreamBodyBytes: number;
  providerIdleTimeoutMs: number;
  scrapeFailureLogIntervalMs: number;
  /** A pod whose filtered page fell short is scraped whole this long (agent/telemetry/scraper.ts). */
  scrapeFilterRetryMs: number;
  /** 0: never (agent/memory/idle-release.ts). */
  releaseMemoryAfterIdleMs: number;
  prefixMaxBlocks: number;
  prefixBlocksPerPod: number;
  /** Blocks the precise (KV-event) index keeps per pod at most, below the pod's own KV capacity. */
  preciseBlocksPerPod: number;
  /** How long a KV-event replay may take before the pod's index is rebuilt without it. */
  kvReplayTimeoutMs: number;
  /** Live KV-event batches held per pod while a replay runs; past it the index is rebuilt. */
  kvMaxHeldBatches: number;
  loraLoadMs: number;
  loraSlotWaitMs: number;
  /** The API listener's HTTP/1.1 bounds and timers (node:http's, agent/server/listener.ts). */
  apiMaxHeaderBytes: number;
  apiMaxHeaders: number;
  apiMaxTargetBytes: number;
  apiHeadersTimeoutMs: number;
  /** 0: none. */
  apiRequestTimeoutMs: number;
  apiKeepAliveTimeoutMs: number;
  /** 0: no limit. */
  apiMaxRequestsPerSocket: number;
}

/** The key sent to matching model-server pods: `pod` (NAME or NAMESPACE/NAME) beats `namespace` beats neither. */
export interface PodCredential {
  namespace?: string;
  pod?: string;
  apiKey: SecretRef;
}

export interface GossipSettings {
  bind: string;
  key: SecretRef;
  intervalMs: number;
  fanout: number;
  /** Backstop: an origin silent this long is dropped, even if membership lists its agent. */
  ttlMs: number;
  networkCostMs: number;
  /** Our gossip address as peers list it (names our origin; checked against membership). */
  advertise?: string;
  /** Our Ed25519 private key (PEM); absent: a fresh one per start. */
  identity?: SecretRef;
  /** Static mode: the peers' public keys, by node (agent/gossip/signatures.ts). */
  peerKeys?: { node: string; key: string }[];
  /** Kubernetes: bind agents' keys to their pods with a ServiceAccount token (agent/gossip/binding.ts). */
  tokenBinding?: { tokenFile: string; audience?: string; serviceAccount?: string };
}

export interface AgentSettings {
  node: string;
  /** Model → directory of its tokenizer.json and tokenizer_config.json (precise prefix routing). */
  tokenizers: Record<string, string>;
  listen: { api: string; admin: string };
  discovery: 'static' | 'kubernetes';
  scrapeIntervalMs: number;
  /** Filtered scrapes where the engine's server can answer them (agent/telemetry/scraper.ts). */
  scrapeFilter: boolean;
  pods: Pod[];
  peers: string[];
  /** Static mode: ranges a gossiped pod's address must lie in (see agent/cluster/peer-pods.ts). */
  peerPodCidrs: string[];
  gossip?: GossipSettings;
  tenantHeader: string;
  /** The operator named a tenant header: trust it even in Kubernetes mode. */
  tenantHeaderExplicit: boolean;
  providers: ProviderSettings[];
  policies: unknown[];
  detectors: DetectorSpec[];
  namespaces: Map<string, Record<string, string>>;
  limits: Limits;
  kubernetes: NonNullable<AgentConfigFile['kubernetes']>;
  logLevel: 'debug' | 'info' | 'warn' | 'error';
  podCredentials: PodCredential[];
  /** Share of requests (0..1) that write a JSON log line; 0 = off. */
  requestLogSample: number;
  /** Session affinity; absent: off. */
  sessions?: SessionSettings;
  /** OpenTelemetry export; absent: no spans at all. */
  tracing?: NonNullable<AgentConfigFile['tracing']>;
}

export const DEFAULT_LIMITS: Limits = {
  maxBodyBytes: 4 * 1024 * 1024,
  podConnectTimeoutMs: 10_000,
  // Long: a 4k-token answer at 50 ms per token under load is over 3 minutes. A dead pod is still
  // caught at once (refused) or by undici's TCP connect timeout (10 s), not by this.
  podResponseTimeoutMs: 600_000,
  podIdleTimeoutMs: 120_000,
  maxRetries: 2,
  ejectionBaseMs: 1_000,
  ejectionMaxMs: 30_000,
  drainTimeoutMs: 25_000,
  scrapeTimeoutMs: 1_000,
  maxWaiting: 1_000,
  peerShortlist: DEFAULT_PEER_SHORTLIST,
  budgetCompletionEstimate: 1_024,
  budgetWarmupMs: DEFAULT_LEDGER_LIMITS.warmupMs,
  budgetPendingTtlMs: DEFAULT_LEDGER_LIMITS.pendingTtlMs,
  budgetMaxCounters: DEFAULT_LEDGER_LIMITS.maxCounters,
  budgetMaxOrigins: DEFAULT_LEDGER_LIMITS.maxOrigins,
  classifyMaxChars: DEFAULT_SCAN_LIMITS.maxChars,
  classifyMaxDepth: DEFAULT_SCAN_LIMITS.maxDepth,
  classifyMaxValues: DEFAULT_SCAN_LIMITS.maxNodes,
  maxLabelValues: 100,
  maxJsonDepth: 64,
  offloadBodyBytes: 128 * 1024,
  bodyWorkers: 1,
  maxConnectionsPerPod: 256,
  maxUpstreamBodyBytes: 32 * 1024 * 1024,
  providerIdleTimeoutMs: 60_000,
  scrapeFailureLogIntervalMs: 30_000,
  scrapeFilterRetryMs: 10 * 60_000,
  releaseMemoryAfterIdleMs: 10_000,
  prefixMaxBlocks: DEFAULT_PREFIX_MAX_BLOCKS,
  prefixBlocksPerPod: DEFAULT_MAX_BLOCKS_PER_POD,
  preciseBlocksPerPod: 65_536,
  kvReplayTimeoutMs: 2000,
  kvMaxHeldBatches: 10_000,
  loraLoadMs: DEFAULT_LORA_COSTS.loadMs,
  loraSlotWaitMs: DEFAULT_LORA_COSTS.slotWaitMs,
  // node:http's own defaults (maxHeadersCount 2000 was a cut, here a refusal past it).
  apiMaxHeaderBytes: 16 * 1024,
  apiMaxHeaders: 2000,
  apiMaxTargetBytes: 8 * 1024,
  apiHeadersTimeoutMs: 60_000,
  apiRequestTimeoutMs: 300_000,
  apiKeepAliveTimeoutMs: 5_000,
  apiMaxRequestsPerSocket: 0,
};

export class ConfigError extends Error {
  readonly problems: string[];
  constructor(source: string, problems: string[]) {
    super(`invalid config ${source}:\n  ${problems.join('\n  ')}`);
    this.problems = problems;
  }
}

function describeFound(value: unknown): string {
  if (value === undefined) return 'nothing';
  const text = JSON.stringify(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

/** What a schema node wants, in words a person configuring the agent understands. */
function expectation(schema: unknown, fallback: string): string {
  const node = schema as { description?: string; pattern?: string; anyOf?: { const?: unknown }[] };
  const literals = node.anyOf?.map((option) => option.const);
  if (literals?.length && literals.every((l) => typeof l === 'string')) return `expected one of ${literals.join(', ')}`;
  if (node.description) return `expected ${node.description}`;
  return fallback.charAt(0).toLowerCase() + fallback.slice(1);
}

/** Schema errors as `path: message (found X)`, one per path, most specific first. */
export function schemaProblems(schema: Parameters<typeof Errors>[0], value: unknown): string[] {
  const seen = new Set<string>();
  const problems: string[] = [];
  for (const error of Errors(schema, value)) {
    const path = dotPath(error.path) || '(root)';
    if (seen.has(path)) continue;
    seen.add(path);
    problems.push(`${path}: ${expectation(error.schema, error.message)}, found ${describeFound(error.value)}`);
  }
  return problems;
}

function crossChecks(file: AgentConfigFile): string[] {
  const problems: string[] = [];
  const discovery = file.discovery ?? 'static';
  if (discovery === 'static' && !file.pods?.length) problems.push('pods: static discovery needs at least one pod');
  if (file.listen.gossip && !file.gossip) problems.push('gossip: listen.gossip is set, so gossip.key is required');
  // Static mode has no API to vouch for an agent's key: peers' origins count only when signed by a listed key.
  if (
    discovery === 'static' &&
    file.listen.gossip &&
    file.gossip &&
    file.peers?.length &&
    !file.gossip.peerKeys?.length
  )
    problems.push("gossip.peerKeys: static mode with peers needs each peer node's agent public key");
  for (const [i, { node, key }] of (file.gossip?.peerKeys ?? []).entries())
    if (Buffer.from(key, 'base64').length !== 32)
      problems.push(`gossip.peerKeys[${i}].key: ${node}: not a base64 Ed25519 public key`);
  problems.push(...providerListProblems(file.providers ?? [], 'providers'));
  for (const key of ['apiHeadersTimeout', 'apiKeepAliveTimeout'] as const) {
    const value = file.limits?.[key];
    if (value !== undefined && !(parseDuration(value) > 0)) problems.push(`limits.${key}: must be positive`);
  }
  const pods = new Set<string>();
  (file.pods ?? []).forEach((p, i) => {
    const id = `${p.namespace ?? 'default'}/${p.name}`;
    if (pods.has(id)) problems.push(`pods[${i}].name: duplicate pod "${id}"`);
    pods.add(id);
  });
  problems.push(...compileDetectors(file.detectors ?? []).errors);
  try {
    cidrBlockList(file.gossip?.peerPodCidrs ?? []);
  } catch (error) {
    problems.push(`gossip.peerPodCidrs: ${(error as Error).message}`);
  }
  return problems;
}

/** Policies in the config file are checked like `kinference policy check` checks a CRD object. */
function policyProblems(file: AgentConfigFile): string[] {
  const docs = file.policies ?? [];
  const { policies, errors } = loadPolicies(docs);
  const problems = errors.flatMap((e) =>
    e.errors.map((x) => `policies[${e.index}]${x.path ? `.${x.path}` : ''}: ${x.message}`),
  );
  problems.push(
    ...compilePolicies(policies, new Map(Object.entries(file.namespaces ?? {}))).problems.map((p) => `policies: ${p}`),
  );
  const known = new Set((file.providers ?? []).map((p) => p.name));
  for (const policy of policies) {
    const index = docs.indexOf(policy);
    for (const name of policy.spec.overflow?.providers ?? []) {
      if (!known.has(name))
        problems.push(`policies[${index}].spec.overflow.providers: no provider named "${name}" in providers`);
    }
  }
  return problems;
}

/**
 * In a DaemonSet every agent shares one config file; what differs per pod comes from the
 * downward API: KINFERENCE_NODE (spec.nodeName) and KINFERENCE_POD_IP (status.podIP).
 */
function withDownwardApi(raw: unknown, env: NodeJS.ProcessEnv): unknown {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) return raw;
  const file = { ...(raw as Record<string, unknown>) };
  if (file.node === undefined && env.KINFERENCE_NODE) file.node = env.KINFERENCE_NODE;
  if (file.discovery === 'kubernetes' && env.KINFERENCE_POD_IP) {
    const kubernetes = (file.kubernetes ?? {}) as Record<string, unknown>;
    if (kubernetes.podIP === undefined) file.kubernetes = { ...kubernetes, podIP: env.KINFERENCE_POD_IP };
  }
  return file;
}

/** Validated settings from a parsed config object; throws ConfigError naming every bad key. */
export function settingsFromObject(
  input: unknown,
  source = 'config',
  env: NodeJS.ProcessEnv = process.env,
): AgentSettings {
  const raw = withDownwardApi(input, env);
  const problems = schemaProblems(AgentConfigSchema, raw).map((p) =>
    p.startsWith('node: ') ? `${p} (set node, or KINFERENCE_NODE from the downward API)` : p,
  );
  if (problems.length) throw new ConfigError(source, problems);
  const file = raw as AgentConfigFile;
  const cross = [...crossChecks(file), ...policyProblems(file)];
  if (cross.length) throw new ConfigError(source, cross);

  const scrapeIntervalMs = parseDuration(file.scrapeInterval ?? '100ms');
  const limits = file.limits ?? {};
  return {
    node: file.node,
    listen: { api: file.listen.api, admin: file.listen.admin },
    discovery: file.discovery ?? 'static',
    scrapeIntervalMs,
    scrapeFilter: file.scrapeFilter ?? true,
    pods: (file.pods ?? []).map((p) => {
      const namespace = p.namespace ?? 'default';
      return {
        uid: `${namespace}/${p.name}`,
        name: p.name,
        namespace,
        node: file.node,
        address: p.address,
        // An adapter is a model the pod serves: the pool indexes and /v1/models list it too.
        models: [...new Set([...p.models, ...(p.adapters ?? [])])],
        engine: p.engine,
        ...(p.adapters?.length ? { adapters: p.adapters } : {}),
        ...(p.maxConcurrency !== undefined ? { maxConcurrency: p.maxConcurrency } : {}),
        ...(p.kvEvents ? { kvEvents: p.kvEvents } : {}),
      };
    }),
    tokenizers: file.tokenizers ?? {},
    peers: file.peers ?? [],
    peerPodCidrs: file.gossip?.peerPodCidrs ?? defaultPeerPodCidrs(file.peers ?? []),
    gossip:
      file.listen.gossip && file.gossip
        ? {
            bind: file.listen.gossip,
            key: file.gossip.key,
            intervalMs: parseDuration(file.gossip.interval ?? '200ms'),
            fanout: file.gossip.fanout ?? 3,
            ttlMs: file.gossip.ttl ? parseDuration(file.gossip.ttl) : DEFAULT_TTL_MS,
            networkCostMs: parseDuration(file.gossip.networkCost ?? '2ms'),
            advertise: file.gossip.advertise ?? podGossipAddress(file),
            ...(file.gossip.identity ? { identity: file.gossip.identity } : {}),
            ...(file.gossip.peerKeys ? { peerKeys: file.gossip.peerKeys } : {}),
            ...(file.gossip.tokenBinding ? { tokenBinding: file.gossip.tokenBinding } : {}),
          }
        : undefined,
    tenantHeader: (file.tenantHeader ?? 'x-kinference-tenant').toLowerCase(),
    tenantHeaderExplicit: file.tenantHeader !== undefined,
    providers: (file.providers ?? []).map(providerSettings),
    policies: file.policies ?? [],
    detectors: file.detectors ?? [],
    namespaces: new Map(Object.entries(file.namespaces ?? {})),
    limits: {
      maxBodyBytes: limits.maxBodyBytes ?? DEFAULT_LIMITS.maxBodyBytes,
      podConnectTimeoutMs: durationOr(limits.podConnectTimeout, DEFAULT_LIMITS.podConnectTimeoutMs),
      podResponseTimeoutMs: durationOr(limits.podResponseTimeout, DEFAULT_LIMITS.podResponseTimeoutMs),
      podIdleTimeoutMs: durationOr(limits.podIdleTimeout, DEFAULT_LIMITS.podIdleTimeoutMs),
      maxRetries: limits.maxRetries ?? DEFAULT_LIMITS.maxRetries,
      ejectionBaseMs: durationOr(limits.ejectionBase, DEFAULT_LIMITS.ejectionBaseMs),
      ejectionMaxMs: durationOr(limits.ejectionMax, DEFAULT_LIMITS.ejectionMaxMs),
      drainTimeoutMs: durationOr(limits.drainTimeout, DEFAULT_LIMITS.drainTimeoutMs),
      scrapeTimeoutMs: durationOr(limits.scrapeTimeout, Math.max(DEFAULT_LIMITS.scrapeTimeoutMs, scrapeIntervalMs)),
      maxWaiting: limits.maxWaiting ?? DEFAULT_LIMITS.maxWaiting,
      peerShortlist: limits.peerShortlist ?? DEFAULT_LIMITS.peerShortlist,
      budgetCompletionEstimate: limits.budgetCompletionEstimate ?? DEFAULT_LIMITS.budgetCompletionEstimate,
      budgetWarmupMs: durationOr(limits.budgetWarmup, DEFAULT_LIMITS.budgetWarmupMs),
      budgetPendingTtlMs: durationOr(limits.budgetPendingTtl, DEFAULT_LIMITS.budgetPendingTtlMs),
      budgetMaxCounters: limits.budgetMaxCounters ?? DEFAULT_LIMITS.budgetMaxCounters,
      budgetMaxOrigins: limits.budgetMaxOrigins ?? DEFAULT_LIMITS.budgetMaxOrigins,
      classifyMaxChars: limits.classifyMaxChars ?? DEFAULT_LIMITS.classifyMaxChars,
      classifyMaxDepth: limits.classifyMaxDepth ?? DEFAULT_LIMITS.classifyMaxDepth,
      classifyMaxValues: limits.classifyMaxValues ?? DEFAULT_LIMITS.classifyMaxValues,
      maxLabelValues: limits.maxLabelValues ?? DEFAULT_LIMITS.maxLabelValues,
      maxJsonDepth: limits.maxJsonDepth ?? DEFAULT_LIMITS.maxJsonDepth,
      offloadBodyBytes: limits.offloadBodyBytes ?? DEFAULT_LIMITS.offloadBodyBytes,
      bodyWorkers: limits.bodyWorkers ?? DEFAULT_LIMITS.bodyWorkers,
      maxConnectionsPerPod: limits.maxConnectionsPerPod ?? DEFAULT_LIMITS.maxConnectionsPerPod,
      maxUpstreamBodyBytes: limits.maxUpstreamBodyBytes ?? DEFAULT_LIMITS.maxUpstreamBodyBytes,
      providerIdleTimeoutMs: durationOr(limits.providerIdleTimeout, DEFAULT_LIMITS.providerIdleTimeoutMs),
      scrapeFailureLogIntervalMs: durationOr(
        limits.scrapeFailureLogInterval,
        DEFAULT_LIMITS.scrapeFailureLogIntervalMs,
      ),
      scrapeFilterRetryMs: durationOr(limits.scrapeFilterRetry, DEFAULT_LIMITS.scrapeFilterRetryMs),
      releaseMemoryAfterIdleMs: durationOr(limits.releaseMemoryAfterIdle, DEFAULT_LIMITS.releaseMemoryAfterIdleMs),
      prefixMaxBlocks: limits.prefixMaxBlocks ?? DEFAULT_LIMITS.prefixMaxBlocks,
      prefixBlocksPerPod: limits.prefixBlocksPerPod ?? DEFAULT_LIMITS.prefixBlocksPerPod,
      preciseBlocksPerPod: limits.preciseBlocksPerPod ?? DEFAULT_LIMITS.preciseBlocksPerPod,
      kvReplayTimeoutMs: durationOr(limits.kvReplayTimeout, DEFAULT_LIMITS.kvReplayTimeoutMs),
      kvMaxHeldBatches: limits.kvMaxHeldBatches ?? DEFAULT_LIMITS.kvMaxHeldBatches,
      loraLoadMs: durationOr(limits.loraLoad, DEFAULT_LIMITS.loraLoadMs),
      loraSlotWaitMs: durationOr(limits.loraSlotWait, DEFAULT_LIMITS.loraSlotWaitMs),
      apiMaxHeaderBytes: limits.apiMaxHeaderBytes ?? DEFAULT_LIMITS.apiMaxHeaderBytes,
      apiMaxHeaders: limits.apiMaxHeaders ?? DEFAULT_LIMITS.apiMaxHeaders,
      apiMaxTargetBytes: limits.apiMaxTargetBytes ?? DEFAULT_LIMITS.apiMaxTargetBytes,
      apiHeadersTimeoutMs: durationOr(limits.apiHeadersTimeout, DEFAULT_LIMITS.apiHeadersTimeoutMs),
      apiRequestTimeoutMs: durationOr(limits.apiRequestTimeout, DEFAULT_LIMITS.apiRequestTimeoutMs),
      apiKeepAliveTimeoutMs: durationOr(limits.apiKeepAliveTimeout, DEFAULT_LIMITS.apiKeepAliveTimeoutMs),
      apiMaxRequestsPerSocket: limits.apiMaxRequestsPerSocket ?? DEFAULT_LIMITS.apiMaxRequestsPerSocket,
    },
    kubernetes: file.kubernetes ?? {},
    logLevel: file.logLevel ?? 'info',
    podCredentials: file.podCredentials ?? [],
    requestLogSample: file.requestLog?.sample ?? 0,
    ...(file.tracing ? { tracing: file.tracing } : {}),
    ...(file.sessions
      ? {
          sessions: {
            header: (file.sessions.header ?? 'x-session-id').toLowerCase(),
            fromBody: file.sessions.fromBody ?? true,
            maxSessions: file.sessions.maxSessions ?? 100_000,
            ttlMs: durationOr(file.sessions.ttl, 600_000),
          },
        }
      : {}),
  };
}

/** Kubernetes: peers reach us at our pod IP (downward API) and the gossip port. */
/** A duration setting in ms, or its default when the file leaves it out. */
function durationOr(text: string | undefined, fallbackMs: number): number {
  return text ? parseDuration(text) : fallbackMs;
}

function podGossipAddress(file: AgentConfigFile): string | undefined {
  const podIP = file.discovery === 'kubernetes' ? file.kubernetes?.podIP : undefined;
  return podIP && file.listen.gossip ? hostPort(podIP, parseHostPort(file.listen.gossip).port) : undefined;
}

/** Without declared ranges, a peer's pods must sit at a peer agent's own IP (single-host setups, tests). */
function defaultPeerPodCidrs(peers: readonly string[]): string[] {
  const hosts = peers.map((p) => parseHostPort(p).host).filter((h) => isIP(h) !== 0);
  return [...new Set(hosts)].map((h) => `${h}/${isIP(h) === 6 ? 128 : 32}`);
}

export function loadConfigFile(path: string): AgentSettings {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new ConfigError(path, [`cannot read file: ${(error as Error).message}`]);
  }
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (error) {
    throw new ConfigError(path, [`not valid YAML: ${(error as Error).message.split('\n')[0]}`]);
  }
  return settingsFromObject(raw, path);
}
