// The platform floor: what cluster-wide policies' `spec.guardrails` set for everyone (the built-in
// floor denies [pii, unscanned] when none sets one). Applied last to every resolved policy; a
// namespace policy that would loosen it is rejected. Pure.
import type { EffectivePolicy } from '../types.ts';
import { parseDuration } from '../../shared/duration.ts';
import { policyKey, type InferencePolicy } from './schema.ts';
import type { PolicySetIssue } from './issues.ts';
import { budgetLoosenings, type BudgetLimit } from '../budget/limits.ts';

/** A policy that leaves `overflow.deny.tags` out still keeps pii, and what could not be read, on the cluster. */
export const DEFAULT_DENY_TAGS: readonly string[] = ['pii', 'unscanned'];
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

export function floorName(floor: Floor): string {
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

/** Resolved policies are shared between requests: frozen, so no caller can change one for the next. */
export function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}
