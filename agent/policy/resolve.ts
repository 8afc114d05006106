// Which policy applies to one request, and may that request leave the cluster. Pure.
//
// Applicability: a policy in namespace N applies to callers in N, one in "*" to every caller;
// `spec.models` / `spec.tenants`, when present, must list the request's model / tenant.
//
// Precedence among applicable policies (higher wins), by specificity bits
//   namespace = caller's (4) · models listed (2) · tenants listed (1):
//     7 ns+models+tenants  6 ns+models  5 ns+tenants  4 ns
//     3 *+models+tenants   2 *+models   1 *+tenants   0 *
// so an exact namespace always beats "*", then a model list beats a tenant list.
// Two applicable policies with equal specificity are a tie: checkPolicySet reports it when their
// models and tenants overlap; at run time the name that sorts first wins, so routing stays
// deterministic even if a broken set reaches the cluster.
//
// Namespace annotations (the platform team's shortcuts) are applied after that:
//   kinference.io/policy: NAME   the policy NAME in the caller's namespace, else in "*" (or, as
//                                NAMESPACE/NAME, exactly that one: a platform namespace can hold
//                                policies only annotations select) wins over the precedence
//                                above when its models/tenants cover the request (otherwise
//                                normal resolution applies). A tie in namespace N that involves
//                                the policy N pins is no tie: the pin decides it;
//   kinference.io/overflow       deny: no providers; allow: the policy's providers as they are;
//   kinference.io/ttft-slo       replaces the SLO (a duration);
//   kinference.io/tenant         the tenant of every caller in the namespace; it wins over a
//                                tenant the caller claims (header), which wins over the namespace.
//
// Defaults: a field a policy leaves out takes the built-in default, not the value of a less
// specific policy (what you read in one policy is what applies). With no policy at all:
// SLO 1000 ms, exclude queued above 2 over 30 s, no overflow (deny tags [pii, unscanned]), wait 2 s.
//
// The platform floor (`spec.guardrails` of cluster-wide policies; [pii, unscanned] denied when
// none sets one) is applied last, to every result: its deny tags and tenants are added, the SLO
// is capped, and overflow is removed when the floor forbids it. A namespace policy that tries to
// loosen the floor (lists deny tags without a floor tag, a looser SLO, providers while the floor
// forbids overflow, or guardrails of its own) is rejected: kept out, and reported.
import type { EffectivePolicy, ExcludeRule } from '../types.ts';
import { isDuration, parseDuration } from '../config/duration.ts';
import type { InferencePolicy } from './schema.ts';
import { budgetLoosenings, type BudgetLimit } from '../budget/limits.ts';

export const ANNOTATIONS = {
  policy: 'kinference.io/policy',
  overflow: 'kinference.io/overflow',
  ttftSlo: 'kinference.io/ttft-slo',
  tenant: 'kinference.io/tenant',
} as const;

export const BUILTIN_POLICY_NAME = 'builtin/default';
export const DEFAULT_SLO_TTFT_MS = 1000;
export const DEFAULT_EXCLUDE: readonly ExcludeRule[] = [{ metric: 'queued', above: 2, windowMs: 30_000 }];
/** A policy that leaves `overflow.deny.tags` out still keeps pii, and what could not be read, on the cluster. */
export const DEFAULT_DENY_TAGS: readonly string[] = ['pii', 'unscanned'];
export const DEFAULT_WAIT_MAX_MS = 2000;

export interface Floor {
  denyTags: readonly string[];
  denyTenants: readonly string[];
  /** Undefined: no cap. */
  maxSloTtftMs?: number;
  overflowAllowed: boolean;
  /** May a caller whose namespace is unknown follow the cluster-wide policy (else: never leaves)? */
  unidentifiedMayLeave: boolean;
  /** The most any tenant may overflow (every setter's limits hold); empty: no cap. */
  overflowBudget: readonly BudgetLimit[];
  /** The cluster-wide policies that set it (empty: the built-in floor), for messages. */
  sources: readonly string[];
}

export const BUILTIN_FLOOR: Floor = deepFreeze({
  denyTags: [...DEFAULT_DENY_TAGS],
  denyTenants: [],
  overflowAllowed: true,
  unidentifiedMayLeave: false,
  overflowBudget: [],
  sources: [],
});

/** The floor the cluster-wide policies' guardrails set together (each adds; the strictest wins). */
export function floorOf(policies: readonly InferencePolicy[]): Floor {
  const setters = policies.filter((p) => p.metadata.namespace === '*' && p.spec.guardrails);
  if (setters.length === 0) return BUILTIN_FLOOR;
  const tags = new Set<string>();
  const tenants = new Set<string>();
  let maxSloTtftMs: number | undefined;
  let overflowAllowed = true;
  let unidentifiedMayLeave = true;
  const overflowBudget: BudgetLimit[] = [];
  for (const policy of setters) {
    const g = policy.spec.guardrails!;
    for (const t of g.deny?.tags ?? DEFAULT_DENY_TAGS) tags.add(t);
    for (const t of g.deny?.tenants ?? []) tenants.add(t);
    if (g.maxSloTtft !== undefined) maxSloTtftMs = Math.min(maxSloTtftMs ?? Infinity, parseDuration(g.maxSloTtft));
    if (g.overflow === 'deny') overflowAllowed = false;
    if (g.unidentifiedCallers !== 'policy') unidentifiedMayLeave = false;
    overflowBudget.push(...(g.overflowBudget?.limits ?? []));
  }
  return deepFreeze({
    denyTags: [...tags].sort(),
    denyTenants: [...tenants].sort(),
    maxSloTtftMs,
    overflowAllowed,
    unidentifiedMayLeave,
    overflowBudget,
    sources: setters.map(policyKey),
  });
}

function floorName(floor: Floor): string {
  return floor.sources.length > 0 ? `the platform floor (${floor.sources.join(', ')})` : 'the built-in platform floor';
}

/** Why a policy may not be loaded under this floor (empty: it may). Cluster-wide policies set the floor; they are not checked against it. */
export function guardrailViolations(policy: InferencePolicy, floor: Floor): PolicySetIssue[] {
  if (policy.metadata.namespace === '*') return [];
  const issues: Omit<PolicySetIssue, 'index'>[] = [];
  const { spec } = policy;
  if (spec.guardrails) {
    issues.push({
      severity: 'error',
      path: 'spec.guardrails',
      message: "guardrails may only be set by a cluster-wide policy (the agent's namespace, or * in static config)",
    });
  }
  const tags = spec.overflow?.deny?.tags;
  const dropped = tags ? floor.denyTags.filter((t) => !tags.includes(t)) : [];
  if (dropped.length > 0) {
    issues.push({
      severity: 'error',
      path: 'spec.overflow.deny.tags',
      message: `may not drop ${dropped.join(', ')}: ${floorName(floor)} denies ${floor.denyTags.join(', ')}; a namespace policy may only add tags (leave deny.tags out to inherit them)`,
    });
  }
  if (
    spec.slo?.ttft !== undefined &&
    floor.maxSloTtftMs !== undefined &&
    parseDuration(spec.slo.ttft) > floor.maxSloTtftMs
  ) {
    issues.push({
      severity: 'error',
      path: 'spec.slo.ttft',
      message: `${spec.slo.ttft} is looser than ${floorName(floor)} allows (at most ${floor.maxSloTtftMs}ms)`,
    });
  }
  if (!floor.overflowAllowed && (spec.overflow?.providers?.length ?? 0) > 0) {
    issues.push({
      severity: 'error',
      path: 'spec.overflow.providers',
      message: `${floorName(floor)} forbids overflow; a namespace policy may not list providers`,
    });
  }
  for (const loosening of budgetLoosenings(spec.overflow?.budget?.limits ?? [], floor.overflowBudget)) {
    issues.push({
      severity: 'error',
      path: 'spec.overflow.budget',
      message: `${loosening} (${floorName(floor)}); a namespace policy may only set tighter limits`,
    });
  }
  return issues.map((issue) => ({ ...issue, index: -1 }));
}

/** The floor over one resolved policy: deny lists grow, the SLO is capped, overflow may go. */
export function applyFloor(policy: EffectivePolicy, floor: Floor): EffectivePolicy {
  const tags = floor.denyTags.filter((t) => !policy.overflow.denyTags.includes(t));
  const tenants = floor.denyTenants.filter((t) => !policy.overflow.denyTenants.includes(t));
  const capSlo = floor.maxSloTtftMs !== undefined && policy.sloTtftMs > floor.maxSloTtftMs;
  const dropProviders = !floor.overflowAllowed && policy.overflow.providers.length > 0;
  const capBudget = floor.overflowBudget.some((cap) => !policy.budget?.includes(cap));
  if (tags.length === 0 && tenants.length === 0 && !capSlo && !dropProviders && !capBudget) return policy;
  return deepFreeze({
    ...policy,
    // Floor limits are added once (they are the same objects), so applying the floor twice is a no-op.
    ...(capBudget
      ? { budget: [...(policy.budget ?? []), ...floor.overflowBudget.filter((cap) => !policy.budget?.includes(cap))] }
      : {}),
    exclude: policy.exclude.map((rule) => ({ ...rule })),
    sloTtftMs: capSlo ? floor.maxSloTtftMs! : policy.sloTtftMs,
    overflow: {
      providers: dropProviders ? [] : [...policy.overflow.providers],
      denyTags: [...policy.overflow.denyTags, ...tags],
      denyTenants: [...policy.overflow.denyTenants, ...tenants],
    },
  });
}

export const BUILTIN_DEFAULT: EffectivePolicy = deepFreeze({
  name: BUILTIN_POLICY_NAME,
  sloTtftMs: DEFAULT_SLO_TTFT_MS,
  exclude: DEFAULT_EXCLUDE.map((rule) => ({ ...rule })),
  overflow: { providers: [], denyTags: [...DEFAULT_DENY_TAGS], denyTenants: [] },
  waitMaxMs: DEFAULT_WAIT_MAX_MS,
});

/** Namespace → its annotations; a Map (cluster snapshot) or a plain object (config file). */
export type NamespaceAnnotations =
  ReadonlyMap<string, Readonly<Record<string, string>>> | Readonly<Record<string, Readonly<Record<string, string>>>>;

export const SPECIFICITY = { namespace: 4, models: 2, tenants: 1 } as const;

export function specificity(policy: InferencePolicy): number {
  return (
    (policy.metadata.namespace === '*' ? 0 : SPECIFICITY.namespace) +
    (policy.spec.models ? SPECIFICITY.models : 0) +
    (policy.spec.tenants ? SPECIFICITY.tenants : 0)
  );
}

export function policyKey(policy: InferencePolicy): string {
  return `${policy.metadata.namespace}/${policy.metadata.name}`;
}

/** Does the policy cover this request (namespace, model and tenant)? */
export function appliesTo(policy: InferencePolicy, tenant: string, namespace: string, model: string): boolean {
  const { namespace: ns } = policy.metadata;
  return (
    (ns === '*' || ns === namespace) &&
    (!policy.spec.models || policy.spec.models.includes(model)) &&
    (!policy.spec.tenants || policy.spec.tenants.includes(tenant))
  );
}

/** The policy's own fields over the built-in defaults, durations in ms. Annotations not applied. */
export function effectiveOf(policy: InferencePolicy): EffectivePolicy {
  const { spec } = policy;
  return {
    name: policyKey(policy),
    sloTtftMs: spec.slo?.ttft !== undefined ? parseDuration(spec.slo.ttft) : DEFAULT_SLO_TTFT_MS,
    exclude: spec.exclude
      ? spec.exclude.map((rule) => ({ metric: rule.metric, above: rule.above, windowMs: parseDuration(rule.window) }))
      : DEFAULT_EXCLUDE.map((rule) => ({ ...rule })),
    overflow: {
      providers: [...(spec.overflow?.providers ?? [])],
      denyTags: [...(spec.overflow?.deny?.tags ?? DEFAULT_DENY_TAGS)],
      denyTenants: [...(spec.overflow?.deny?.tenants ?? [])],
    },
    waitMaxMs: spec.wait?.max !== undefined ? parseDuration(spec.wait.max) : DEFAULT_WAIT_MAX_MS,
    ...(spec.overflow?.budget ? { budget: spec.overflow.budget.limits.map((limit) => ({ ...limit })) } : {}),
    ...(spec.priority
      ? { priority: { class: spec.priority.class ?? 'standard', header: [...(spec.priority.header ?? [])] } }
      : {}),
  };
}

// ---------------------------------------------------------------------------------------------
// Set checks

export interface PolicySetIssue {
  severity: 'error' | 'warning';
  /** Index of the policy in the array given. */
  index: number;
  /** Field the issue is about, e.g. `metadata.name`, `spec.overflow.deny.tags`. */
  path: string;
  message: string;
  /** The other policy of a tie or duplicate. */
  other?: number;
}

/**
 * Problems no single policy shows: duplicates, ambiguous ties (same namespace, same specificity,
 * overlapping models and tenants, unless the namespace pins one of the two), and warnings about
 * overflow that lets pii leave. Without annotations, every tie counts.
 */
export function checkPolicySet(
  policies: readonly InferencePolicy[],
  annotations?: NamespaceAnnotations,
): PolicySetIssue[] {
  const issues: PolicySetIssue[] = [];
  const pins = new Map<string, InferencePolicy>();
  if (annotations) {
    for (const [namespace, values] of annotationEntries(annotations)) {
      const ref = values[ANNOTATIONS.policy]?.trim();
      const pinned = ref ? findPinned(policies, namespace, ref) : undefined;
      if (pinned) pins.set(namespace, pinned);
    }
  }
  for (let j = 0; j < policies.length; j++) {
    const b = policies[j];
    for (let i = 0; i < j; i++) {
      const a = policies[i];
      if (a.metadata.namespace !== b.metadata.namespace) continue;
      if (a.metadata.name === b.metadata.name) {
        issues.push({
          severity: 'error',
          index: j,
          other: i,
          path: 'metadata.name',
          message: `duplicate: ${policyKey(a)} is defined twice`,
        });
        continue;
      }
      if (specificity(a) !== specificity(b)) continue;
      const models = overlap(a.spec.models, b.spec.models);
      const tenants = overlap(a.spec.tenants, b.spec.tenants);
      if (!models || !tenants) continue;
      // Where both apply, the pinned one applies too, and wins.
      const pinned = pins.get(a.metadata.namespace);
      if (pinned === a || pinned === b) continue;
      issues.push({
        severity: 'error',
        index: j,
        other: i,
        path: 'spec',
        message: `ambiguous: ties with ${policyKey(a)} (same specificity) for models ${describeSet(models)} and tenants ${describeSet(tenants)}; make one more specific, split their models/tenants, or pin one with the namespace annotation ${ANNOTATIONS.policy}`,
      });
    }
  }
  const floor = floorOf(policies);
  policies.forEach((policy, index) => {
    for (const issue of guardrailViolations(policy, floor)) issues.push({ ...issue, index });
  });
  policies.forEach((policy, index) => {
    const providers = policy.spec.overflow?.providers ?? [];
    const denyTags = policy.spec.overflow?.deny?.tags ?? DEFAULT_DENY_TAGS;
    if (providers.length > 0 && !denyTags.includes('pii')) {
      issues.push({
        severity: 'warning',
        index,
        path: 'spec.overflow.deny.tags',
        message: `requests tagged pii may leave the cluster to ${providers.join(', ')} (add pii to deny.tags unless that is intended)`,
      });
    }
  });
  return issues;
}

/** Common entries of two optional lists (absent = everything); undefined when disjoint. */
function overlap(
  a: readonly string[] | undefined,
  b: readonly string[] | undefined,
): readonly string[] | 'all' | undefined {
  if (!a && !b) return 'all';
  if (!a) return b;
  if (!b) return a;
  const common = a.filter((x) => b.includes(x));
  return common.length > 0 ? common : undefined;
}

function describeSet(set: readonly string[] | 'all'): string {
  return set === 'all' ? '(all)' : `[${set.join(', ')}]`;
}

// ---------------------------------------------------------------------------------------------
// Compiled index: built when policies or annotations change, consulted per request.

export interface CompiledPolicies {
  /** The policy for one request, annotations applied. Never throws; frozen, shared result. */
  resolve(tenant: string | undefined, namespace: string, model: string): EffectivePolicy;
  /** The tenant of a caller: namespace annotation, else what it claims, else its namespace. */
  tenantFor(namespace: string, claimed?: string): string;
  /** Set errors (ties, duplicates) and annotations that were ignored; for logs and /debug/state. */
  readonly problems: readonly string[];
  /** The policies in force (rejected ones left out). */
  readonly policies: readonly InferencePolicy[];
  /** Policies kept out because they would loosen the platform floor. */
  readonly rejected: readonly { name: string; reasons: string[] }[];
  readonly floor: Floor;
}

interface Entry {
  policy: InferencePolicy;
  name: string;
  models: ReadonlySet<string> | undefined;
  tenants: ReadonlySet<string> | undefined;
  specificity: number;
  effective: EffectivePolicy;
}

interface NamespaceOverrides<P> {
  pinned?: P;
  overflow?: 'allow' | 'deny';
  sloTtftMs?: number;
  tenant?: string;
}

const CACHE_LIMIT = 4096;

export function compilePolicies(
  all: readonly InferencePolicy[],
  annotations: NamespaceAnnotations = new Map(),
): CompiledPolicies {
  const floor = floorOf(all);
  const rejected: { name: string; reasons: string[] }[] = [];
  const policies = all.filter((policy) => {
    const violations = guardrailViolations(policy, floor);
    if (violations.length > 0)
      rejected.push({ name: policyKey(policy), reasons: violations.map((v) => `${v.path}: ${v.message}`) });
    return violations.length === 0;
  });
  const problems: string[] = rejected.map((r) => `${r.name}: rejected, ${r.reasons.join('; ')}`);
  problems.push(
    ...checkPolicySet(policies, annotations)
      .filter((issue) => issue.severity === 'error')
      .map((issue) => `${policyKey(policies[issue.index])}: ${issue.message}`),
  );

  const byNamespace = new Map<string, Entry[]>();
  const entries = new Map<InferencePolicy, Entry>();
  for (const policy of policies) {
    const entry: Entry = {
      policy,
      name: policy.metadata.name,
      models: policy.spec.models ? new Set(policy.spec.models) : undefined,
      tenants: policy.spec.tenants ? new Set(policy.spec.tenants) : undefined,
      specificity: specificity(policy),
      effective: applyFloor(deepFreeze(effectiveOf(policy)), floor),
    };
    entries.set(policy, entry);
    const list = byNamespace.get(policy.metadata.namespace) ?? [];
    list.push(entry);
    byNamespace.set(policy.metadata.namespace, list);
  }
  for (const list of byNamespace.values()) {
    list.sort((a, b) => b.specificity - a.specificity || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }
  const star = byNamespace.get('*') ?? [];

  const { overrides, issues } = parseAnnotations(annotations, (namespace, ref) => {
    const pinned = findPinned(policies, namespace, ref);
    return pinned && entries.get(pinned);
  });
  for (const issue of issues)
    problems.push(`namespace ${issue.namespace}: annotation ${issue.key}: ${issue.message}; ignored`);
  for (const [namespace, o] of overrides) {
    if (o.sloTtftMs !== undefined && floor.maxSloTtftMs !== undefined && o.sloTtftMs > floor.maxSloTtftMs) {
      problems.push(
        `namespace ${namespace}: annotation ${ANNOTATIONS.ttftSlo}: looser than ${floorName(floor)} allows; capped at ${floor.maxSloTtftMs}ms`,
      );
    }
    if (o.overflow === 'allow' && !floor.overflowAllowed)
      problems.push(
        `namespace ${namespace}: annotation ${ANNOTATIONS.overflow}: allow has no effect, ${floorName(floor)} forbids overflow`,
      );
  }

  const cache = new Map<string, EffectivePolicy>();
  const builtin = applyFloor(BUILTIN_DEFAULT, floor);

  function tenantFor(namespace: string, claimed?: string): string {
    return overrides.get(namespace)?.tenant ?? (claimed || namespace);
  }

  function resolveUncached(tenant: string, namespace: string, model: string): EffectivePolicy {
    const o = overrides.get(namespace);
    let chosen: Entry | undefined;
    if (o?.pinned && covers(o.pinned, tenant, model)) chosen = o.pinned;
    chosen ??=
      byNamespace.get(namespace)?.find((e) => covers(e, tenant, model)) ?? star.find((e) => covers(e, tenant, model));
    const base = chosen?.effective ?? builtin;
    if (!o || (o.overflow !== 'deny' && o.sloTtftMs === undefined)) return base;
    return applyFloor(
      deepFreeze({
        ...base,
        exclude: base.exclude.map((rule) => ({ ...rule })),
        sloTtftMs: o.sloTtftMs ?? base.sloTtftMs,
        overflow: {
          providers: o.overflow === 'deny' ? [] : [...base.overflow.providers],
          denyTags: [...base.overflow.denyTags],
          denyTenants: [...base.overflow.denyTenants],
        },
      }),
      floor,
    );
  }

  return {
    problems,
    policies,
    rejected,
    floor,
    tenantFor,
    resolve(claimedTenant, namespace, model) {
      const tenant = tenantFor(namespace, claimedTenant);
      const key = `${namespace}\u0000${model}\u0000${tenant}`;
      let hit = cache.get(key);
      if (hit === undefined) {
        // Model names come from requests: bound the cache instead of trusting them.
        if (cache.size >= CACHE_LIMIT) cache.clear();
        hit = resolveUncached(tenant, namespace, model);
        cache.set(key, hit);
      }
      return hit;
    },
  };
}

export interface AnnotationIssue {
  namespace: string;
  key: string;
  message: string;
}

/** Annotations that resolution would ignore (bad values, unknown policy names). */
export function checkNamespaceAnnotations(
  policies: readonly InferencePolicy[],
  annotations: NamespaceAnnotations,
): AnnotationIssue[] {
  return parseAnnotations(annotations, (namespace, ref) => findPinned(policies, namespace, ref)).issues;
}

/** The policy a `kinference.io/policy` value names for callers in `namespace`. */
export function findPinned(
  policies: readonly InferencePolicy[],
  namespace: string,
  ref: string,
): InferencePolicy | undefined {
  const { ns, name } = policyRef(namespace, ref);
  const find = (n: string) => policies.find((p) => p.metadata.namespace === n && p.metadata.name === name);
  return ref.includes('/') ? find(ns) : (find(ns) ?? find('*'));
}

function policyRef(namespace: string, ref: string): { ns: string; name: string } {
  const slash = ref.indexOf('/');
  return slash === -1 ? { ns: namespace, name: ref } : { ns: ref.slice(0, slash), name: ref.slice(slash + 1) };
}

function parseAnnotations<P>(
  annotations: NamespaceAnnotations,
  find: (namespace: string, name: string) => P | undefined,
): { overrides: Map<string, NamespaceOverrides<P>>; issues: AnnotationIssue[] } {
  const overrides = new Map<string, NamespaceOverrides<P>>();
  const issues: AnnotationIssue[] = [];
  for (const [namespace, values] of annotationEntries(annotations)) {
    const o: NamespaceOverrides<P> = {};
    const bad = (key: string, message: string) => issues.push({ namespace, key, message });
    const pinned = values[ANNOTATIONS.policy];
    if (pinned !== undefined) {
      const found = find(namespace, pinned.trim());
      if (found !== undefined) o.pinned = found;
      else
        bad(
          ANNOTATIONS.policy,
          pinned.includes('/') ? `no policy ${pinned.trim()}` : `no policy "${pinned.trim()}" in ${namespace} or *`,
        );
    }
    const overflow = values[ANNOTATIONS.overflow];
    const mode = overflow?.trim().toLowerCase();
    if (mode === 'allow' || mode === 'deny') o.overflow = mode;
    else if (overflow !== undefined)
      bad(ANNOTATIONS.overflow, `expected allow or deny, found ${JSON.stringify(overflow)}`);
    const slo = values[ANNOTATIONS.ttftSlo];
    if (slo !== undefined) {
      if (isDuration(slo)) o.sloTtftMs = parseDuration(slo);
      else bad(ANNOTATIONS.ttftSlo, `expected a duration like 800ms, found ${JSON.stringify(slo)}`);
    }
    const tenant = values[ANNOTATIONS.tenant];
    if (tenant?.trim()) o.tenant = tenant.trim();
    else if (tenant !== undefined) bad(ANNOTATIONS.tenant, 'expected a tenant name, found an empty value');
    if (Object.keys(o).length > 0) overrides.set(namespace, o);
  }
  return { overrides, issues };
}

function covers(entry: Entry, tenant: string, model: string): boolean {
  return (!entry.models || entry.models.has(model)) && (!entry.tenants || entry.tenants.has(tenant));
}

function annotationEntries(annotations: NamespaceAnnotations): Iterable<[string, Readonly<Record<string, string>>]> {
  return annotations instanceof Map ? annotations.entries() : Object.entries(annotations);
}

// ---------------------------------------------------------------------------------------------

export interface LeaveDecision {
  allowed: boolean;
  reason: string;
}

/**
 * May this request be sent to a hosted provider? Denials come first, so the reason names what
 * keeps the request home even where providers are listed.
 */
export function mayLeave(policy: EffectivePolicy, request: { tenant: string; tags: readonly string[] }): LeaveDecision {
  const tag = request.tags.find((t) => policy.overflow.denyTags.includes(t));
  if (tag !== undefined) return { allowed: false, reason: `tag ${tag} may not leave the cluster (${policy.name})` };
  if (policy.overflow.denyTenants.includes(request.tenant)) {
    return { allowed: false, reason: `tenant ${request.tenant} may not leave the cluster (${policy.name})` };
  }
  if (policy.overflow.providers.length === 0)
    return { allowed: false, reason: `no overflow providers (${policy.name})` };
  return { allowed: true, reason: `may overflow to ${policy.overflow.providers.join(', ')} (${policy.name})` };
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}
