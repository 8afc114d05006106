// The InferencePolicy model: ONE TypeBox schema from which the agent's validator and the CRD's
// OpenAPI v3 schema are both derived, so `policy check`, the agent and the API server agree.
// The spec's sections are built in schema-parts.ts; validation lives in validate.ts.
import { Type, type Static } from '@sinclair/typebox';
import {
  ATTAINMENT_PATTERN,
  DenyLists,
  Duration,
  ExcludeRuleSchema,
  GuardrailsSchema,
  Name,
  NameList,
  OverflowBudgetSchema,
  PrioritySchema,
  strict,
} from './schema-parts.ts';

// Re-exported so importers keep one place to take the policy model from.
export { ATTAINMENT_PATTERN } from './schema-parts.ts';

export const API_GROUP = 'kinference.io';
export const API_VERSION = 'kinference.io/v1alpha1';
export const KIND = 'InferencePolicy';

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
            DenyLists({
              object: 'Conditions under which a request may not leave.',
              tags: 'A request with any of these tags never leaves. Absent: [pii, unscanned].',
              tenants: "These tenants' requests never leave.",
            }),
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

/** A policy's name where it is shown: namespace/name. */
export function policyKey(policy: InferencePolicy): string {
  return `${policy.metadata.namespace}/${policy.metadata.name}`;
}

/** Longest exclusion window: the history of load the agent keeps for each pod. */
export const MAX_EXCLUDE_WINDOW_MS = 5 * 60_000;
