// Namespace annotations: the platform team's shortcuts on a namespace (which policy, overflow
// allowed or not, the SLO, the tenant), parsed once per change of annotations. Pure.
import { isDuration, parseDuration } from '../../shared/duration.ts';
import { ATTAINMENT_PATTERN, type InferencePolicy } from './schema.ts';

export const ANNOTATIONS = {
  policy: 'kinference.io/policy',
  overflow: 'kinference.io/overflow',
  ttftSlo: 'kinference.io/ttft-slo',
  sloAttainment: 'kinference.io/slo-attainment',
  tenant: 'kinference.io/tenant',
} as const;

/** Namespace → its annotations; a Map (cluster snapshot) or a plain object (config file). */
export type NamespaceAnnotations =
  ReadonlyMap<string, Readonly<Record<string, string>>> | Readonly<Record<string, Readonly<Record<string, string>>>>;

/** What a namespace's annotations change for its callers. */
export interface NamespaceOverrides<P> {
  pinned?: P;
  overflow?: 'allow' | 'deny';
  sloTtftMs?: number;
  sloAttainment?: number;
  tenant?: string;
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

export function parseAnnotations<P>(
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
    const attainment = values[ANNOTATIONS.sloAttainment];
    if (attainment !== undefined) {
      if (isPercentage(attainment.trim())) o.sloAttainment = parsePercentage(attainment.trim());
      else
        bad(
          ANNOTATIONS.sloAttainment,
          `expected a percentage above 0% and below 100% like 99%, found ${JSON.stringify(attainment)}`,
        );
    }
    const tenant = values[ANNOTATIONS.tenant];
    if (tenant?.trim()) o.tenant = tenant.trim();
    else if (tenant !== undefined) bad(ANNOTATIONS.tenant, 'expected a tenant name, found an empty value');
    if (Object.keys(o).length > 0) overrides.set(namespace, o);
  }
  return { overrides, issues };
}

/** "99.5%" → 0.995 (the schema's pattern has checked the form). */
export function parsePercentage(value: string): number {
  return Math.round(Number(value.slice(0, -1)) * 1000) / 100_000; // 3 decimals, without 0.999000…1
}

function isPercentage(value: string): boolean {
  return new RegExp(ATTAINMENT_PATTERN).test(value);
}

export function annotationEntries(
  annotations: NamespaceAnnotations,
): Iterable<[string, Readonly<Record<string, string>>]> {
  return annotations instanceof Map ? annotations.entries() : Object.entries(annotations);
}
