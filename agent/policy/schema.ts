// The InferencePolicy model: ONE TypeBox schema from which the agent's validator and the CRD's
// OpenAPI v3 schema are both derived, so `policy check`, the agent and the API server agree.
import { isDuration, parseDuration } from '../config/duration.ts';
import { BUDGET_WINDOWS, duplicateScopes, PRIORITIES } from '../budget/limits.ts';
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { dotPath, formatPath, isRecord, pointerSegments } from '../../shared/json.ts';

export const API_GROUP = 'kinference.io';
export const API_VERSION = 'kinference.io/v1alpha1';
export const KIND = 'InferencePolicy';

/** Same grammar as agent/config/duration.ts, anchored without surrounding spaces (RE2-compatible). */
export const DURATION_PATTERN = '^[0-9]+(\\.[0-9]+)?(ms|s|m|h)$';
/** Request tags are lowercased by the classifier, so a deny tag outside this charset never matches. */
export const TAG_PATTERN = '^[a-z0-9][a-z0-9._-]*$';

/** A percentage like "99%" or "99.9%", above 0 and below 100 (100% would admit no pod at all). */
export const ATTAINMENT_PATTERN = '^([1-9][0-9]?(\\.[0-9]{1,3})?|0\\.[0-9]{0,2}[1-9])%$';

export const EXCLUDE_METRICS = ['queued', 'running', 'kvCache', 'predictedTTFT'] as const;

// `expected` is our own keyword: the validator's words for what a field wants. It never reaches
// the CRD (toOpenAPI keeps only keywords Kubernetes knows).
const Duration = (description: string) =>
  Type.String({ pattern: DURATION_PATTERN, maxLength: 32, expected: 'a duration like 30s', description });

const Name = (description?: string) =>
  Type.String({ minLength: 1, maxLength: 253, expected: 'a non-empty name', ...(description ? { description } : {}) });

const NameList = (description: string, maxItems: number) =>
  Type.Array(Name(), { minItems: 1, maxItems, expected: 'a non-empty list of names', description });

const strict = { additionalProperties: false } as const;

export const ExcludeRuleSchema = Type.Object(
  {
    metric: Type.Union(
      EXCLUDE_METRICS.map((m) => Type.Literal(m)),
      {
        description:
          'queued: waiting requests; running: requests in the batch; kvCache: KV-cache use 0..1; predictedTTFT: predicted time to first token in ms.',
      },
    ),
    above: Type.Number({
      minimum: 0,
      expected: 'a number ≥ 0',
      description: 'Threshold; for kvCache a fraction 0..1, for predictedTTFT milliseconds.',
    }),
    window: Duration('The metric is averaged over this window, e.g. 30s.'),
  },
  {
    ...strict,
    description: 'A pod whose windowed metric is above the threshold is bypassed.',
    'x-kubernetes-validations': [
      {
        rule: "self.metric != 'kvCache' || self.above <= 1.0",
        message: 'kvCache is a fraction: above must be between 0 and 1',
      },
    ],
  },
);

const TagList = (description: string) =>
  Type.Array(Type.String({ pattern: TAG_PATTERN, maxLength: 64, expected: 'a lowercase tag of a-z 0-9 . _ -' }), {
    maxItems: 64,
    expected: 'a list of tags',
    description,
  });

const MAX_BUDGET_COUNT = 1e15; // far above any real budget, below 2^53 so sums stay exact

export const BudgetLimitSchema = Type.Object(
  {
    window: Type.Union(
      BUDGET_WINDOWS.map((w) => Type.Literal(w)),
      { description: 'Calendar window (UTC) the limit counts over: minute, hour or day.' },
    ),
    tokens: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: MAX_BUDGET_COUNT,
        expected: 'an integer ≥ 0',
        description:
          'Most overflowed tokens (prompt + completion, as the provider reports them) per tenant in the window.',
      }),
    ),
    requests: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: MAX_BUDGET_COUNT,
        expected: 'an integer ≥ 0',
        description: 'Most overflowed requests per tenant in the window.',
      }),
    ),
    provider: Type.Optional(Name('Count only overflow to this provider; absent: every provider.')),
  },
  {
    ...strict,
    description:
      'One limit on overflow per tenant and window; a tenant with no budget left does not leave the cluster.',
    'x-kubernetes-validations': [
      { rule: 'has(self.tokens) || has(self.requests)', message: 'a limit needs tokens, requests or both' },
    ],
  },
);

export const OverflowBudgetSchema = Type.Object(
  {
    limits: Type.Array(BudgetLimitSchema, {
      minItems: 1,
      maxItems: 12,
      expected: 'a non-empty list of limits',
      description: 'Every limit holds at once.',
    }),
  },
  {
    ...strict,
    description: 'Cluster-wide limits on what each tenant may overflow, enforced on the sum over every agent.',
  },
);

const PriorityClass = (description: string) =>
  Type.Union(
    PRIORITIES.map((p) => Type.Literal(p)),
    { description },
  );

export const PrioritySchema = Type.Object(
  {
    class: Type.Optional(
      PriorityClass('The class of requests that claim none: critical, standard or sheddable. Absent: standard.'),
    ),
    header: Type.Optional(
      Type.Array(PriorityClass('A class callers may claim.'), {
        maxItems: 3,
        expected: 'a list of critical, standard, sheddable',
        description:
          'Classes a caller may claim with the x-kinference-priority header; absent or empty: the header is ignored.',
      }),
    ),
  },
  {
    ...strict,
    description:
      'Order among waiting requests: critical before standard before sheddable; sheddable is refused first when waiting is full.',
  },
);

/** The platform floor: only in a cluster-wide policy; every other policy and annotation inherits it and may only tighten it. */
export const GuardrailsSchema = Type.Object(
  {
    deny: Type.Optional(
      Type.Object(
        {
          tags: Type.Optional(
            TagList('Tags that never leave, whatever a namespace policy says. Absent: [pii, unscanned].'),
          ),
          tenants: Type.Optional(
            Type.Array(Name(), {
              maxItems: 256,
              expected: 'a list of tenants',
              description: 'Tenants whose requests never leave.',
            }),
          ),
        },
        { ...strict, description: 'What never leaves the cluster.' },
      ),
    ),
    maxSloTtft: Type.Optional(Duration('The loosest SLO a policy or annotation may set.')),
    overflow: Type.Optional(
      Type.Union([Type.Literal('allow'), Type.Literal('deny')], {
        description: 'deny: no request leaves the cluster, whatever any policy lists. Absent: allow.',
      }),
    ),
    overflowBudget: Type.Optional(
      Type.Object(
        { limits: OverflowBudgetSchema.properties.limits },
        {
          ...strict,
          description:
            'The most any tenant may overflow: applies to every tenant, and a namespace policy may only set tighter limits.',
        },
      ),
    ),
    unidentifiedCallers: Type.Optional(
      Type.Union([Type.Literal('local'), Type.Literal('policy')], {
        description:
          'local: a caller whose namespace cannot be established never leaves the cluster; policy: it follows the cluster-wide policy. Absent: local.',
      }),
    ),
  },
  {
    ...strict,
    description:
      'The platform floor (cluster-wide policies only): inherited by every policy and annotation, which may only tighten it.',
  },
);

export const InferencePolicySpecSchema = Type.Object(
  {
    models: Type.Optional(NameList('Models this policy applies to; absent: every model.', 256)),
    tenants: Type.Optional(
      NameList(
        'Tenants this policy applies to; absent: every tenant (tenant = caller namespace unless annotated).',
        256,
      ),
    ),
    slo: Type.Optional(
      Type.Object(
        {
          ttft: Type.Optional(Duration('A pod predicted slower than this to first token is not a candidate.')),
          attainment: Type.Optional(
            Type.String({
              pattern: ATTAINMENT_PATTERN,
              maxLength: 16,
              expected: 'a percentage above 0% and below 100%, like 99%',
              description:
                'For requests that may leave: a pod is a candidate only if it answers within the SLO with this confidence (its predicted TTFT quantile). Default 99%.',
            }),
          ),
        },
        {
          ...strict,
          description: 'Latency target.',
        },
      ),
    ),
    exclude: Type.Optional(
      Type.Array(ExcludeRuleSchema, {
        maxItems: 16,
        expected: 'a list of exclusion rules',
        description:
          'A pod matching any rule is bypassed. Absent: the built-in rule (queued above 2 over 30s); []: no rule.',
      }),
    ),
    overflow: Type.Optional(
      Type.Object(
        {
          providers: Type.Optional(
            Type.Array(Name(), {
              maxItems: 16,
              expected: 'a list of provider names',
              description:
                'Names of providers declared in the agent configuration, tried in order; empty or absent: requests never leave the cluster.',
            }),
          ),
          deny: Type.Optional(
            Type.Object(
              {
                tags: Type.Optional(
                  Type.Array(
                    Type.String({ pattern: TAG_PATTERN, maxLength: 64, expected: 'a lowercase tag of a-z 0-9 . _ -' }),
                    {
                      maxItems: 64,
                      expected: 'a list of tags',
                      description: 'A request with any of these tags never leaves. Absent: [pii, unscanned].',
                    },
                  ),
                ),
                tenants: Type.Optional(
                  Type.Array(Name(), {
                    maxItems: 256,
                    expected: 'a list of tenants',
                    description: "These tenants' requests never leave.",
                  }),
                ),
              },
              { ...strict, description: 'Conditions under which a request may not leave.' },
            ),
          ),
          budget: Type.Optional(OverflowBudgetSchema),
        },
        { ...strict, description: 'Whether and where a request may leave the cluster when no pod can take it.' },
      ),
    ),
    wait: Type.Optional(
      Type.Object(
        { max: Type.Optional(Duration('How long a request that may not leave waits for a pod before 429.')) },
        { ...strict, description: 'Bounded local wait.' },
      ),
    ),
    priority: Type.Optional(PrioritySchema),
    guardrails: Type.Optional(GuardrailsSchema),
  },
  { ...strict, description: 'Which requests this policy covers and how they are routed.' },
);

export const PolicyConditionSchema = Type.Object(
  {
    type: Type.String({ maxLength: 316 }),
    status: Type.Union([Type.Literal('True'), Type.Literal('False'), Type.Literal('Unknown')]),
    reason: Type.Optional(Type.String({ maxLength: 1024 })),
    message: Type.Optional(Type.String({ maxLength: 32768 })),
    lastTransitionTime: Type.Optional(Type.String({ format: 'date-time' })),
    observedGeneration: Type.Optional(Type.Integer({ minimum: 0, format: 'int64' })),
  },
  strict,
);

export const PolicyStatusSchema = Type.Object(
  {
    observedGeneration: Type.Optional(
      Type.Integer({ minimum: 0, format: 'int64', description: 'Generation the conditions describe.' }),
    ),
    conditions: Type.Optional(
      Type.Array(PolicyConditionSchema, {
        maxItems: 16,
        description: 'Accepted, Ambiguous, …',
        'x-kubernetes-list-type': 'map',
        'x-kubernetes-list-map-keys': ['type'],
      }),
    ),
  },
  { ...strict, description: 'Set by the control plane.' },
);

/**
 * A whole InferencePolicy object as the agent reads it. Metadata is Kubernetes' own: extra keys
 * (uid, labels, …) are allowed; `namespace: "*"` (static config only) means every namespace.
 * apiVersion/kind are optional here because the static config lists bare `{metadata, spec}`;
 * `policy check` requires them (see validatePolicy's `requireTypeMeta`).
 */
export const InferencePolicySchema = Type.Object(
  {
    apiVersion: Type.Optional(Type.Literal(API_VERSION)),
    kind: Type.Optional(Type.Literal(KIND)),
    metadata: Type.Object(
      {
        name: Name('Policy name; the annotation kinference.io/policy selects by it.'),
        namespace: Type.String({ minLength: 1, maxLength: 253, expected: 'a namespace, or "*" for every namespace' }),
      },
      { additionalProperties: true },
    ),
    spec: InferencePolicySpecSchema,
    // Written by a controller, never input: whatever is there must not make a policy invalid.
    status: Type.Optional(Type.Unknown()),
  },
  strict,
);

export type InferencePolicySpec = Static<typeof InferencePolicySpecSchema>;
export type InferencePolicy = Static<typeof InferencePolicySchema>;
export type PolicyStatus = Static<typeof PolicyStatusSchema>;

/** A policy's name where it is shown: namespace/name. */
export function policyKey(policy: InferencePolicy): string {
  return `${policy.metadata.namespace}/${policy.metadata.name}`;
}

// ---------------------------------------------------------------------------------------------
// Validation

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

// ValueErrorType numbers from @sinclair/typebox/errors (0.34), kept local so the hot checks stay plain.
const OBJECT_ADDITIONAL_PROPERTIES = 42;
const OBJECT_REQUIRED_PROPERTY = 45;

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
    errors.push({ path, at, message: describe(error.type, error.schema, error.value, String(at.at(-1) ?? '')) });
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
/** Longest exclusion window: the history of load the agent keeps for each pod. */
export const MAX_EXCLUDE_WINDOW_MS = 5 * 60_000;

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

function describe(type: number, schema: TSchema, value: unknown, key: string): string {
  if (type === OBJECT_ADDITIONAL_PROPERTIES) {
    // The schema here is the parent object's; the unknown key is the path's last segment.
    const known = Object.keys((schema as { properties?: object }).properties ?? {});
    const hint = closest(key, known);
    return `unknown field, expected one of ${known.join(', ')}${hint ? ` (did you mean "${hint}"?)` : ''}`;
  }
  if (type === OBJECT_REQUIRED_PROPERTY) return `missing, expected ${expectedOf(schema)}`;
  return `expected ${expectedOf(schema)}, found ${found(value)}`;
}

function expectedOf(schema: TSchema): string {
  if (typeof schema.expected === 'string') return schema.expected;
  const literals = literalValues(schema);
  if (literals) return literals.length === 1 ? JSON.stringify(literals[0]) : `one of ${literals.join(', ')}`;
  switch (schema.type) {
    case 'object':
      return 'an object';
    case 'array':
      return 'a list';
    case 'number':
      return typeof schema.minimum === 'number' ? `a number ≥ ${schema.minimum}` : 'a number';
    case 'integer':
      return 'an integer';
    case 'boolean':
      return 'true or false';
    case 'string':
      return schema.minLength ? 'a non-empty string' : 'a string';
    default:
      return 'a valid value';
  }
}

export function literalValues(schema: TSchema): unknown[] | undefined {
  if ('const' in schema) return [schema.const];
  if (Array.isArray(schema.anyOf) && schema.anyOf.every((s: TSchema) => 'const' in s)) {
    return schema.anyOf.map((s: TSchema) => s.const);
  }
  return undefined;
}

function found(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (value === null) return 'null';
  if (typeof value === 'string') return JSON.stringify(value.length > 60 ? `${value.slice(0, 57)}...` : value);
  if (Array.isArray(value)) return value.length === 0 ? 'an empty list' : `a list of ${value.length}`;
  if (typeof value === 'object') return 'an object';
  return String(value);
}

function closest(key: string, candidates: string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of candidates) {
    const d = editDistance(key.toLowerCase(), candidate.toLowerCase());
    if (d < bestDistance) [best, bestDistance] = [candidate, d];
  }
  return bestDistance <= Math.max(1, Math.floor(key.length / 3)) ? best : undefined;
}

function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) {
      next[j] = Math.min(row[j] + 1, next[j - 1] + 1, row[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    row = next;
  }
  return row[b.length];
}
