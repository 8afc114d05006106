// Reads and validates the agent's config file (at start, and again on each change in static
// mode), and turns it into typed settings with milliseconds and defaults. Errors name the key, what was expected and what was found.
import { readFileSync } from 'node:fs';
// Only the error iterator (`Value.Errors`): '@sinclair/typebox/value' loads every value operation.
import { Errors } from '@sinclair/typebox/errors';
import { parse as parseYaml } from 'yaml';
import type { Pod, SessionSettings } from '../types.ts';
import type { ProviderSettings } from '../providers/types.ts';
import { parseDuration } from '../../shared/duration.ts';
import { loadPolicies } from '../policy/validate.ts';
import { compilePolicies } from '../policy/resolve.ts';
import { compileDetectors, type DetectorSpec } from '../classify/custom.ts';
import {
  gossipProblems,
  gossipSettings,
  peerPodCidrProblems,
  peerPodCidrs,
  type GossipSettings,
} from '../gossip/config.ts';
import { staticPodProblems, staticPods } from '../cluster/config.ts';
import type { PodCredential } from '../forward/config.ts';
import { sessionSettings } from '../route/session-config.ts';
import { AgentConfigSchema, type AgentConfigFile } from './schema.ts';
import { limitsSettings, type Limits } from './limits.ts';
import { providerListProblems, providerSettings } from '../providers/config.ts';
import { dotPath } from '../../shared/json.ts';

export type { PodCredential } from '../forward/config.ts';

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
  problems.push(...gossipProblems(file.gossip, file.listen.gossip, discovery, file.peers ?? []));
  problems.push(...providerListProblems(file.providers ?? [], 'providers'));
  for (const key of ['apiHeadersTimeout', 'apiKeepAliveTimeout'] as const) {
    const value = file.limits?.[key];
    if (value !== undefined && !(parseDuration(value) > 0)) problems.push(`limits.${key}: must be positive`);
  }
  problems.push(...staticPodProblems(file.pods ?? []));
  problems.push(...compileDetectors(file.detectors ?? []).errors);
  problems.push(...peerPodCidrProblems(file.gossip));
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
  return {
    node: file.node,
    listen: { api: file.listen.api, admin: file.listen.admin },
    discovery: file.discovery ?? 'static',
    scrapeIntervalMs,
    scrapeFilter: file.scrapeFilter ?? true,
    pods: staticPods(file.pods ?? [], file.node),
    tokenizers: file.tokenizers ?? {},
    peers: file.peers ?? [],
    peerPodCidrs: peerPodCidrs(file.gossip, file.peers ?? []),
    gossip: gossipSettings(
      file.gossip,
      file.listen.gossip,
      file.discovery === 'kubernetes' ? file.kubernetes?.podIP : undefined,
    ),
    tenantHeader: (file.tenantHeader ?? 'x-kinference-tenant').toLowerCase(),
    tenantHeaderExplicit: file.tenantHeader !== undefined,
    providers: (file.providers ?? []).map(providerSettings),
    policies: file.policies ?? [],
    detectors: file.detectors ?? [],
    namespaces: new Map(Object.entries(file.namespaces ?? {})),
    limits: limitsSettings(file.limits ?? {}, scrapeIntervalMs),
    kubernetes: file.kubernetes ?? {},
    logLevel: file.logLevel ?? 'info',
    podCredentials: file.podCredentials ?? [],
    requestLogSample: file.requestLog?.sample ?? 0,
    ...(file.tracing ? { tracing: file.tracing } : {}),
    ...(file.sessions ? { sessions: sessionSettings(file.sessions) } : {}),
  };
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
