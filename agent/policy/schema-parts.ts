// The building blocks of the InferencePolicy spec: field builders, patterns, and the sections
// (exclusion rules, overflow budgets, priority, guardrails) that schema.ts assembles into the
// spec. Kept apart so the top-level shape of a policy reads on one screen.
import { BUDGET_WINDOWS, PRIORITIES } from '../budget/limits.ts';
import { Type } from '@sinclair/typebox';

/** Same grammar as shared/duration.ts, anchored without surrounding spaces (RE2-compatible). */
export const DURATION_PATTERN = '^[0-9]+(\\.[0-9]+)?(ms|s|m|h)$';
/** Request tags are lowercased by the classifier, so a deny tag outside this charset never matches. */
export const TAG_PATTERN = '^[a-z0-9][a-z0-9._-]*$';

/** A percentage like "99%" or "99.9%", above 0 and below 100 (100% would admit no pod at all). */
export const ATTAINMENT_PATTERN = '^([1-9][0-9]?(\\.[0-9]{1,3})?|0\\.[0-9]{0,2}[1-9])%$';

export const EXCLUDE_METRICS = ['queued', 'running', 'kvCache', 'predictedTTFT'] as const;

// `expected` is our own keyword: the validator's words for what a field wants. It never reaches
// the CRD (toOpenAPI keeps only keywords Kubernetes knows).
export const Duration = (description: string) =>
  Type.String({ pattern: DURATION_PATTERN, maxLength: 32, expected: 'a duration like 30s', description });

export const Name = (description?: string) =>
  Type.String({ minLength: 1, maxLength: 253, expected: 'a non-empty name', ...(description ? { description } : {}) });

export const NameList = (description: string, maxItems: number) =>
  Type.Array(Name(), { minItems: 1, maxItems, expected: 'a non-empty list of names', description });

export const strict = { additionalProperties: false } as const;

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

export const TagList = (description: string) =>
  Type.Array(Type.String({ pattern: TAG_PATTERN, maxLength: 64, expected: 'a lowercase tag of a-z 0-9 . _ -' }), {
    maxItems: 64,
    expected: 'a list of tags',
    description,
  });

export const TenantList = (description: string) =>
  Type.Array(Name(), { maxItems: 256, expected: 'a list of tenants', description });

/** Tags and tenants that keep a request in the cluster (a policy's deny, the floor's deny). */
export const DenyLists = (descriptions: { object: string; tags: string; tenants: string }) =>
  Type.Object(
    {
      tags: Type.Optional(TagList(descriptions.tags)),
      tenants: Type.Optional(TenantList(descriptions.tenants)),
    },
    { ...strict, description: descriptions.object },
  );

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
      DenyLists({
        object: 'What never leaves the cluster.',
        tags: 'Tags that never leave, whatever a namespace policy says. Absent: [pii, unscanned].',
        tenants: 'Tenants whose requests never leave.',
      }),
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
