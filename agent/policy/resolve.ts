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
//   kinference.io/slo-attainment replaces the SLO attainment (a percentage like 99.9%);
//   kinference.io/tenant         the tenant of every caller in the namespace; it wins over a
//                                tenant the caller claims (header), which wins over the namespace.
//
// Defaults: a field a policy leaves out takes the built-in default, not the value of a less
// specific policy (what you read in one policy is what applies). With no policy at all:
// SLO 1000 ms at 99% attainment for requests that may leave, exclude queued above 2 over 30 s, no overflow (deny tags [pii, unscanned]), wait 2 s.
//
// The platform floor (`spec.guardrails` of cluster-wide policies; [pii, unscanned] denied when
// none sets one) is applied last, to every result: its deny tags and tenants are added, the SLO
// is capped, and overflow is removed when the floor forbids it. A namespace policy that tries to
// loosen the floor (lists deny tags without a floor tag, a looser SLO, providers while the floor
// forbids overflow, or guardrails of its own) is rejected: kept out, and reported.
import type { EffectivePolicy, ExcludeRule } from '../types.ts';
import { parseDuration } from '../../shared/duration.ts';
import { policyKey, type InferencePolicy } from './schema.ts';
import type { PolicySetIssue } from './issues.ts';
import {
  ANNOTATIONS,
  annotationEntries,
  findPinned,
  parseAnnotations,
  type NamespaceOverrides,
  parsePercentage,
  type NamespaceAnnotations,
} from './annotations.ts';
import {
  applyFloor,
  deepFreeze,
  DEFAULT_DENY_TAGS,
  floorName,
  floorOf,
  guardrailViolations,
  type Floor,
} from './floor.ts';

export const BUILTIN_POLICY_NAME = 'builtin/default';
export const DEFAULT_SLO_TTFT_MS = 1000;
/**
 * 99%: the product's promise is that peak demand doesn't mean failed SLOs, and overflow is what
 * keeps it for requests that may leave; at 99% a pod is admitted only when the predicted TTFT
 * quantile says at most 1 in 100 such requests would be late. It touches only requests that may
 * leave (others keep the mean), so the cost is overflow share, never a 429.
 */
export const DEFAULT_SLO_ATTAINMENT = 0.99;
export const DEFAULT_EXCLUDE: readonly ExcludeRule[] = [{ metric: 'queued', above: 2, windowMs: 30_000 }];
export const DEFAULT_WAIT_MAX_MS = 2000;

export const BUILTIN_DEFAULT: EffectivePolicy = deepFreeze({
  name: BUILTIN_POLICY_NAME,
  sloTtftMs: DEFAULT_SLO_TTFT_MS,
  sloAttainment: DEFAULT_SLO_ATTAINMENT,
  exclude: DEFAULT_EXCLUDE.map((rule) => ({ ...rule })),
  overflow: { providers: [], denyTags: [...DEFAULT_DENY_TAGS], denyTenants: [] },
  waitMaxMs: DEFAULT_WAIT_MAX_MS,
});

export const SPECIFICITY = { namespace: 4, models: 2, tenants: 1 } as const;

export function specificity(policy: InferencePolicy): number {
  return (
    (policy.metadata.namespace === '*' ? 0 : SPECIFICITY.namespace) +
    (policy.spec.models ? SPECIFICITY.models : 0) +
    (policy.spec.tenants ? SPECIFICITY.tenants : 0)
  );
}

/** The policy's own fields over the built-in defaults, durations in ms. Annotations not applied. */
export function effectiveOf(policy: InferencePolicy): EffectivePolicy {
  const { spec } = policy;
  return {
    name: policyKey(policy),
    sloTtftMs: spec.slo?.ttft !== undefined ? parseDuration(spec.slo.ttft) : DEFAULT_SLO_TTFT_MS,
    sloAttainment: spec.slo?.attainment !== undefined ? parsePercentage(spec.slo.attainment) : DEFAULT_SLO_ATTAINMENT,
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

const CACHE_LIMIT = 4096;

/** Each namespace's policies (with their effective values under the floor), most specific first. */
function indexPolicies(policies: readonly InferencePolicy[], floor: Floor) {
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
  return { byNamespace, entries };
}

/** Annotations the floor caps or voids: applied as the floor allows, and reported. */
function annotationsPastTheFloor(overrides: ReadonlyMap<string, NamespaceOverrides<unknown>>, floor: Floor): string[] {
  const problems: string[] = [];
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
  return problems;
}

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

  const { byNamespace, entries } = indexPolicies(policies, floor);
  const star = byNamespace.get('*') ?? [];

  const { overrides, issues } = parseAnnotations(annotations, (namespace, ref) => {
    const pinned = findPinned(policies, namespace, ref);
    return pinned && entries.get(pinned);
  });
  for (const issue of issues)
    problems.push(`namespace ${issue.namespace}: annotation ${issue.key}: ${issue.message}; ignored`);
  problems.push(...annotationsPastTheFloor(overrides, floor));

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
    if (!o || (o.overflow !== 'deny' && o.sloTtftMs === undefined && o.sloAttainment === undefined)) return base;
    return applyFloor(
      deepFreeze({
        ...base,
        exclude: base.exclude.map((rule) => ({ ...rule })),
        sloTtftMs: o.sloTtftMs ?? base.sloTtftMs,
        sloAttainment: o.sloAttainment ?? base.sloAttainment,
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

function covers(entry: Entry, tenant: string, model: string): boolean {
  return (!entry.models || entry.models.has(model)) && (!entry.tenants || entry.tenants.has(tenant));
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
