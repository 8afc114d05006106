// Validation of InferencePolicy documents against the schema, plus the rules a schema cannot say
// alone. Never throws: every problem comes back as a PolicyError with its path.
import { isDuration, parseDuration } from '../../shared/duration.ts';
import { duplicateScopes } from '../budget/limits.ts';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { dotPath, formatPath, isRecord, pointerSegments } from '../../shared/json.ts';
import { API_VERSION, InferencePolicySchema, KIND, MAX_EXCLUDE_WINDOW_MS, type InferencePolicy } from './schema.ts';
import { describeError } from './validation-messages.ts';

export interface PolicyError {
  /** Where, e.g. `spec.exclude[0].window`. Empty for the document itself. */
  path: string;
  /** The same place as keys and indexes, e.g. ['spec', 'exclude', 0, 'window']. */
  at: (string | number)[];
  /** What was expected and what was found. */
  message: string;
}

export type PolicyValidation = { ok: true; policy: InferencePolicy; errors: [] } | { ok: false; errors: PolicyError[] };

export interface ValidateOptions {
  /** Require `apiVersion: kinference.io/v1alpha1` and `kind: InferencePolicy` (policy files). */
  requireTypeMeta?: boolean;
}

const compiled = TypeCompiler.Compile(InferencePolicySchema);

/** Validates one InferencePolicy document; never throws. */
export function validatePolicy(doc: unknown, options: ValidateOptions = {}): PolicyValidation {
  const errors: PolicyError[] = [];
  const seen = new Set<string>();
  if (options.requireTypeMeta && isRecord(doc)) {
    if (doc.apiVersion === undefined)
      errors.push({ path: 'apiVersion', at: ['apiVersion'], message: `missing, expected "${API_VERSION}"` });
    if (doc.kind === undefined) errors.push({ path: 'kind', at: ['kind'], message: `missing, expected "${KIND}"` });
  }
  for (const error of compiled.Errors(doc)) {
    const path = dotPath(error.path);
    // TypeBox reports a missing field twice (required, then wrong type): the first says it best.
    if (seen.has(path)) continue;
    seen.add(path);
    const at = pointerSegments(error.path);
    errors.push({ path, at, message: describeError(error.type, error.schema, error.value, String(at.at(-1) ?? '')) });
  }
  errors.push(...semanticErrors(doc).filter((e) => !seen.has(e.path)));
  if (errors.length > 0) return { ok: false, errors };
  return { ok: true, policy: doc as InferencePolicy, errors: [] };
}

export interface PolicyLoadError {
  index: number;
  /** `namespace/name` when the metadata says it, else `#index`. */
  name: string;
  errors: PolicyError[];
}

/**
 * Validates the policies a cluster snapshot or config file holds; the valid ones are returned,
 * each invalid one is reported and left out (one bad object must not stop the others).
 */
export function loadPolicies(docs: readonly unknown[]): { policies: InferencePolicy[]; errors: PolicyLoadError[] } {
  const policies: InferencePolicy[] = [];
  const errors: PolicyLoadError[] = [];
  docs.forEach((doc, index) => {
    const result = validatePolicy(doc);
    if (result.ok) policies.push(result.policy);
    else errors.push({ index, name: describeDoc(doc) ?? `#${index}`, errors: result.errors });
  });
  return { policies, errors };
}

/** `namespace/name` from whatever metadata a document has, for messages. */
export function describeDoc(doc: unknown): string | undefined {
  if (!isRecord(doc) || !isRecord(doc.metadata)) return undefined;
  const { name, namespace } = doc.metadata;
  if (typeof name !== 'string') return undefined;
  return `${typeof namespace === 'string' ? namespace : '?'}/${name}`;
}

/**
 * Rules a schema cannot say alone; the CRD says the same with x-kubernetes-validations. Written
 * defensively so it also runs on a document with schema errors and all problems show at once.
 */
function semanticErrors(doc: unknown): PolicyError[] {
  const errors: PolicyError[] = [];
  const spec = isRecord(doc) && isRecord(doc.spec) ? doc.spec : undefined;
  if (isRecord(spec?.overflow) && isRecord(spec.overflow.budget))
    errors.push(...limitErrors(spec.overflow.budget.limits, ['spec', 'overflow', 'budget', 'limits']));
  if (isRecord(spec?.guardrails) && isRecord(spec.guardrails.overflowBudget)) {
    errors.push(
      ...limitErrors(spec.guardrails.overflowBudget.limits, ['spec', 'guardrails', 'overflowBudget', 'limits']),
    );
  }
  const exclude = spec?.exclude;
  if (!Array.isArray(exclude)) return errors;
  exclude.forEach((rule: unknown, i) => {
    if (isRecord(rule) && rule.metric === 'kvCache' && typeof rule.above === 'number' && rule.above > 1) {
      errors.push({
        path: `spec.exclude[${i}].above`,
        at: ['spec', 'exclude', i, 'above'],
        message: `expected a fraction between 0 and 1 for kvCache, found ${rule.above}`,
      });
    }
    // The agent keeps this much history per pod; a longer window could only be clamped silently.
    if (
      isRecord(rule) &&
      typeof rule.window === 'string' &&
      isDuration(rule.window) &&
      parseDuration(rule.window) > MAX_EXCLUDE_WINDOW_MS
    ) {
      errors.push({
        path: `spec.exclude[${i}].window`,
        at: ['spec', 'exclude', i, 'window'],
        message: `expected a window of at most 5m, found "${rule.window}"`,
      });
    }
  });
  return errors;
}

/** A limit must bound something, and one scope (window + provider) may have only one limit. */
function limitErrors(limits: unknown, at: (string | number)[]): PolicyError[] {
  if (!Array.isArray(limits)) return [];
  const errors: PolicyError[] = [];
  limits.forEach((limit: unknown, i) => {
    if (isRecord(limit) && limit.tokens === undefined && limit.requests === undefined) {
      errors.push({ path: formatPath([...at, i]), at: [...at, i], message: 'expected tokens, requests or both' });
    }
  });
  const scoped = limits.filter(
    (l): l is { window: 'minute'; provider?: string } => isRecord(l) && typeof l.window === 'string',
  );
  for (const i of duplicateScopes(scoped)) {
    const index = limits.indexOf(scoped[i]);
    errors.push({
      path: formatPath([...at, index]),
      at: [...at, index],
      message: 'expected one limit per window and provider, found a second',
    });
  }
  return errors;
}
