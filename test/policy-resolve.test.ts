import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { InferencePolicy, InferencePolicySpec } from '../agent/policy/schema.ts';
import {
  BUILTIN_DEFAULT,
  checkPolicySet,
  compilePolicies,
  effectiveOf,
  mayLeave,
  specificity,
} from '../agent/policy/resolve.ts';
import { checkNamespaceAnnotations } from '../agent/policy/annotations.ts';

function policy(namespace: string, name: string, spec: InferencePolicySpec = {}): InferencePolicy {
  return { metadata: { name, namespace }, spec };
}

const everywhere = policy('*', 'default', { slo: { ttft: '900ms' } });
const everywhereLlama = policy('*', 'llama', { models: ['llama-3-8b'], slo: { ttft: '800ms' } });
const teamA = policy('team-a', 'team', { slo: { ttft: '700ms' } });
const teamALlama = policy('team-a', 'team-llama', { models: ['llama-3-8b'], slo: { ttft: '600ms' } });
const ALL = [everywhere, everywhereLlama, teamA, teamALlama];

test('with no policy, the built-in default applies', () => {
  const p = compilePolicies([]).resolve('team-a', 'team-a', 'llama-3-8b');
  assert.deepEqual(p, {
    name: 'builtin/default',
    sloTtftMs: 1000,
    sloAttainment: 0.99,
    exclude: [{ metric: 'queued', above: 2, windowMs: 30_000 }],
    overflow: { providers: [], denyTags: ['pii', 'unscanned'], denyTenants: [] },
    waitMaxMs: 2000,
  });
  assert.equal(p, BUILTIN_DEFAULT);
});

test('namespace + model wins over namespace, over * + model, over *', () => {
  const c = compilePolicies(ALL);
  assert.equal(c.resolve('team-a', 'team-a', 'llama-3-8b').name, 'team-a/team-llama');
  assert.equal(c.resolve('team-a', 'team-a', 'mistral-7b').name, 'team-a/team');
  assert.equal(c.resolve('team-b', 'team-b', 'llama-3-8b').name, '*/llama');
  assert.equal(c.resolve('team-b', 'team-b', 'mistral-7b').name, '*/default');
  // Order of the input does not matter.
  assert.equal(compilePolicies([...ALL].reverse()).resolve('team-a', 'team-a', 'llama-3-8b').name, 'team-a/team-llama');
});

test('a namespace policy applies only to callers in that namespace', () => {
  const c = compilePolicies([teamA]);
  assert.equal(c.resolve('team-b', 'team-b', 'llama-3-8b').name, 'builtin/default');
});

test('tenants restrict, and count below models in specificity', () => {
  const forFinance = policy('*', 'finance', { tenants: ['finance'], slo: { ttft: '2s' } });
  const c = compilePolicies([everywhere, everywhereLlama, forFinance]);
  assert.equal(c.resolve('finance', 'finance', 'mistral-7b').name, '*/finance');
  assert.equal(c.resolve('finance', 'finance', 'llama-3-8b').name, '*/llama', 'a model list beats a tenant list');
  assert.equal(c.resolve('team-a', 'team-a', 'mistral-7b').name, '*/default');
  assert.deepEqual([everywhere, forFinance, everywhereLlama, teamA, teamALlama].map(specificity), [0, 1, 2, 4, 6]);
  assert.equal(specificity(policy('x', 'y', { models: ['m'], tenants: ['t'] })), 7);
});

test('durations become milliseconds and missing fields take the built-in defaults', () => {
  const p = effectiveOf(
    policy('ns', 'p', {
      slo: { ttft: '1.5s', attainment: '99.9%' },
      exclude: [
        { metric: 'kvCache', above: 0.9, window: '1m' },
        { metric: 'predictedTTFT', above: 800, window: '250ms' },
      ],
      overflow: { providers: ['bedrock'] },
    }),
  );
  assert.deepEqual(p, {
    name: 'ns/p',
    sloTtftMs: 1500,
    sloAttainment: 0.999,
    exclude: [
      { metric: 'kvCache', above: 0.9, windowMs: 60_000 },
      { metric: 'predictedTTFT', above: 800, windowMs: 250 },
    ],
    overflow: { providers: ['bedrock'], denyTags: ['pii', 'unscanned'], denyTenants: [] },
    waitMaxMs: 2000,
  });
  const empty = effectiveOf(policy('ns', 'empty'));
  assert.deepEqual({ ...empty, name: BUILTIN_DEFAULT.name }, BUILTIN_DEFAULT);
  assert.deepEqual(effectiveOf(policy('ns', 'none', { exclude: [] })).exclude, [], 'exclude: [] means no rule');
});

test("kinference.io/overflow: deny empties the providers; allow keeps the policy's", () => {
  const withProviders = policy('*', 'p', { overflow: { providers: ['bedrock', 'databricks'] } });
  const c = compilePolicies(
    [withProviders],
    new Map([
      ['locked', { 'kinference.io/overflow': 'deny' }],
      ['open', { 'kinference.io/overflow': 'allow' }],
    ]),
  );
  assert.deepEqual(c.resolve('locked', 'locked', 'm').overflow.providers, []);
  assert.deepEqual(c.resolve('open', 'open', 'm').overflow.providers, ['bedrock', 'databricks']);
  assert.deepEqual(c.resolve('other', 'other', 'm').overflow.providers, ['bedrock', 'databricks']);
  // allow cannot invent providers where the policy lists none
  assert.deepEqual(
    compilePolicies([], { open: { 'kinference.io/overflow': 'allow' } }).resolve(undefined, 'open', 'm').overflow
      .providers,
    [],
  );
});

test('kinference.io/ttft-slo replaces the SLO and nothing else', () => {
  const c = compilePolicies([teamALlama], { 'team-a': { 'kinference.io/ttft-slo': '800ms' } });
  const p = c.resolve('team-a', 'team-a', 'llama-3-8b');
  assert.equal(p.sloTtftMs, 800);
  assert.equal(p.name, 'team-a/team-llama');
  assert.deepEqual(p.exclude, effectiveOf(teamALlama).exclude);
});

test('kinference.io/slo-attainment replaces the attainment and nothing else; a bad value is reported and ignored', () => {
  const c = compilePolicies([teamALlama], {
    'team-a': { 'kinference.io/slo-attainment': '99.9%' },
    b: { 'kinference.io/slo-attainment': '100%' },
  });
  const p = c.resolve('team-a', 'team-a', 'llama-3-8b');
  assert.equal(p.sloAttainment, 0.999);
  assert.equal(p.sloTtftMs, 600);
  assert.equal(p.name, 'team-a/team-llama');
  assert.equal(c.resolve('b', 'b', 'llama-3-8b').sloAttainment, 0.99);
  assert.match(
    c.problems.join('\n'),
    /namespace b: annotation kinference.io\/slo-attainment: expected a percentage above 0% and below 100% like 99%, found "100%"; ignored/,
  );
});

test('kinference.io/policy picks a policy by name: in the namespace, in *, or as namespace/name', () => {
  // Policies only an annotation selects live in a namespace nobody calls from.
  const strict = policy('platform', 'strict', { slo: { ttft: '300ms' } });
  const pinnedLocal = policy('team-a', 'pinned', { slo: { ttft: '400ms' } });
  const c = compilePolicies([...ALL, strict, pinnedLocal], {
    'team-a': { 'kinference.io/policy': 'pinned' },
    'team-b': { 'kinference.io/policy': 'platform/strict' },
    'team-c': { 'kinference.io/policy': 'llama' },
  });
  assert.equal(c.resolve('team-a', 'team-a', 'llama-3-8b').name, 'team-a/pinned', 'beats the more specific team-llama');
  assert.equal(c.resolve('team-b', 'team-b', 'llama-3-8b').name, 'platform/strict');
  assert.equal(c.resolve('team-c', 'team-c', 'llama-3-8b').name, '*/llama');
  assert.equal(c.resolve('team-d', 'team-d', 'llama-3-8b').name, '*/llama');
  // team-a/pinned and team-a/team tie, but team-a pins one of them: no ambiguity left.
  assert.equal(c.problems.length, 0, c.problems.join('\n'));
  assert.equal(
    checkPolicySet([...ALL, pinnedLocal]).filter((i) => i.severity === 'error').length,
    1,
    'without the annotation it is a tie',
  );
});

test('a pinned policy that does not cover the model falls back to normal resolution', () => {
  const onlyMistral = policy('team-a', 'mistral', { models: ['mistral-7b'] });
  const c = compilePolicies([...ALL, onlyMistral], { 'team-a': { 'kinference.io/policy': 'mistral' } });
  assert.equal(c.resolve('team-a', 'team-a', 'mistral-7b').name, 'team-a/mistral');
  assert.equal(c.resolve('team-a', 'team-a', 'llama-3-8b').name, 'team-a/team-llama');
});

test('kinference.io/tenant names the tenant of every caller in the namespace', () => {
  const finance = policy('*', 'finance', { tenants: ['finance'], overflow: { providers: ['bedrock'] } });
  const c = compilePolicies([everywhere, finance], { 'payments-prod': { 'kinference.io/tenant': 'finance' } });
  assert.equal(c.tenantFor('payments-prod'), 'finance');
  assert.equal(c.tenantFor('payments-prod', 'someone-else'), 'finance', 'the annotation wins over a claimed tenant');
  assert.equal(c.tenantFor('team-a'), 'team-a');
  assert.equal(c.tenantFor('team-a', 'claimed'), 'claimed');
  assert.equal(c.resolve(undefined, 'payments-prod', 'm').name, '*/finance');
  assert.equal(c.resolve('payments-prod', 'payments-prod', 'm').name, '*/finance');
  assert.equal(c.resolve(undefined, 'team-a', 'm').name, '*/default');
});

test('bad annotations are ignored and reported, never thrown per request', () => {
  const annotations = {
    a: { 'kinference.io/overflow': 'maybe' },
    b: { 'kinference.io/ttft-slo': 'fast' },
    c: { 'kinference.io/policy': 'nope' },
    d: { 'kinference.io/tenant': ' ' },
  };
  const c = compilePolicies([everywhere], annotations);
  assert.equal(c.problems.length, 4);
  assert.match(
    c.problems.join('\n'),
    /namespace b: annotation kinference.io\/ttft-slo: expected a duration like 800ms, found "fast"; ignored/,
  );
  for (const ns of ['a', 'b', 'c', 'd']) assert.equal(c.resolve(undefined, ns, 'm').name, '*/default');
  assert.equal(c.resolve(undefined, 'b', 'm').sloTtftMs, 900);
  assert.deepEqual(
    checkNamespaceAnnotations([everywhere], annotations).map((i) => i.namespace),
    ['a', 'b', 'c', 'd'],
  );
});

test('results are shared and frozen: a caller cannot corrupt the next request', () => {
  const c = compilePolicies(ALL, { 'team-a': { 'kinference.io/overflow': 'deny' } });
  const p = c.resolve('team-a', 'team-a', 'llama-3-8b');
  assert.equal(c.resolve('team-a', 'team-a', 'llama-3-8b'), p);
  assert.throws(() => {
    (p.overflow.providers as string[]).push('evil');
  });
  assert.throws(() => {
    (p as { sloTtftMs: number }).sloTtftMs = 1;
  });
});

test('ambiguous ties are reported when they can apply to the same request', () => {
  const a = policy('team-a', 'a', { models: ['llama-3-8b', 'mistral-7b'] });
  const b = policy('team-a', 'b', { models: ['mistral-7b'] });
  const issues = checkPolicySet([a, b]);
  assert.equal(issues.length, 1);
  assert.equal(issues[0].severity, 'error');
  assert.equal(issues[0].index, 1);
  assert.equal(issues[0].other, 0);
  assert.match(issues[0].message, /ambiguous: ties with team-a\/a .* models \[mistral-7b\]/);
  // Deterministic anyway: the first name wins, and the compiled set carries the problem.
  const c = compilePolicies([b, a]);
  assert.equal(c.resolve('team-a', 'team-a', 'mistral-7b').name, 'team-a/a');
  assert.equal(c.problems.length, 1);
});

test('no tie when policies cannot meet one request', () => {
  const set = [
    policy('team-a', 'llama', { models: ['llama-3-8b'] }),
    policy('team-a', 'mistral', { models: ['mistral-7b'] }), // disjoint models
    policy('team-a', 'all'), // less specific
    policy('team-b', 'all'), // another namespace
    policy('*', 'all'),
    policy('*', 'fin', { tenants: ['finance'] }),
    policy('*', 'ops', { tenants: ['ops'] }), // disjoint tenants
    policy('*', 'fin-llama', { models: ['llama-3-8b'], tenants: ['finance'] }),
    policy('*', 'ops-llama', { models: ['llama-3-8b'], tenants: ['ops'] }),
  ];
  assert.deepEqual(
    checkPolicySet(set).filter((i) => i.severity === 'error'),
    [],
  );
});

test('two unrestricted policies in one namespace tie; a duplicate name is reported as such', () => {
  assert.match(
    checkPolicySet([policy('*', 'a'), policy('*', 'b')])[0].message,
    /ambiguous.*models \(all\) and tenants \(all\)/,
  );
  assert.match(
    checkPolicySet([policy('ns', 'a'), policy('ns', 'a', { slo: { ttft: '1s' } })])[0].message,
    /duplicate: ns\/a is defined twice/,
  );
});

test('warns when overflow is open and pii is not denied', () => {
  const open = policy('*', 'open', { overflow: { providers: ['bedrock'], deny: { tags: ['internal'] } } });
  const defaulted = policy('ns', 'defaulted', { overflow: { providers: ['bedrock'] } });
  const issues = checkPolicySet([open, defaulted]);
  assert.equal(issues.length, 1);
  assert.equal(issues[0].severity, 'warning');
  assert.equal(issues[0].path, 'spec.overflow.deny.tags');
});

// --- mayLeave ---

const open = effectiveOf(
  policy('*', 'open', {
    overflow: { providers: ['bedrock', 'databricks'], deny: { tags: ['pii', 'internal'], tenants: ['finance'] } },
  }),
);

test('may leave when providers are listed and nothing denies it', () => {
  assert.deepEqual(mayLeave(open, { tenant: 'team-a', tags: ['chat'] }), {
    allowed: true,
    reason: 'may overflow to bedrock, databricks (*/open)',
  });
});

test('never lets a request tagged pii leave, even when providers are listed', () => {
  const d = mayLeave(open, { tenant: 'team-a', tags: ['chat', 'pii'] });
  assert.equal(d.allowed, false);
  assert.match(d.reason, /tag pii may not leave/);
  // A policy that says nothing about deny still keeps pii home.
  const defaulted = effectiveOf(policy('*', 'p', { overflow: { providers: ['bedrock'] } }));
  assert.equal(mayLeave(defaulted, { tenant: 't', tags: ['pii'] }).allowed, false);
});

test('a denied tenant never leaves', () => {
  const d = mayLeave(open, { tenant: 'finance', tags: [] });
  assert.equal(d.allowed, false);
  assert.match(d.reason, /tenant finance may not leave/);
});

test('no providers: nothing leaves, whatever the tags', () => {
  const d = mayLeave(BUILTIN_DEFAULT, { tenant: 'team-a', tags: [] });
  assert.deepEqual(d, { allowed: false, reason: 'no overflow providers (builtin/default)' });
  const denied = compilePolicies([policy('*', 'p', { overflow: { providers: ['bedrock'] } })], {
    locked: { 'kinference.io/overflow': 'deny' },
  });
  assert.equal(mayLeave(denied.resolve(undefined, 'locked', 'm'), { tenant: 'locked', tags: [] }).allowed, false);
});

test('the annotated tenant is the one overflow denial sees', () => {
  const c = compilePolicies(
    [policy('*', 'p', { overflow: { providers: ['bedrock'], deny: { tenants: ['finance'] } } })],
    {
      'payments-prod': { 'kinference.io/tenant': 'finance' },
    },
  );
  const tenant = c.tenantFor('payments-prod');
  assert.equal(mayLeave(c.resolve(tenant, 'payments-prod', 'm'), { tenant, tags: [] }).allowed, false);
});

// --- the platform floor ---

test('guardrails: inherited by every policy and annotation, which may only tighten them', () => {
  const floor = policy('*', 'platform', {
    overflow: { providers: ['bedrock'] },
    slo: { ttft: '500ms' },
    guardrails: { deny: { tags: ['pii', 'unscanned', 'confidential'], tenants: ['finance'] }, maxSloTtft: '800ms' },
  });
  const team = policy('team-a', 'fast', { overflow: { providers: ['bedrock'] }, slo: { ttft: '700ms' } });
  const c = compilePolicies([floor, team], new Map([['team-b', { 'kinference.io/ttft-slo': '5s' }]]));
  assert.deepEqual(c.rejected, []);
  const a = c.resolve(undefined, 'team-a', 'm');
  assert.deepEqual(a.overflow.denyTags, ['pii', 'unscanned', 'confidential']);
  assert.deepEqual(a.overflow.denyTenants, ['finance']);
  assert.equal(a.sloTtftMs, 700);
  assert.equal(c.resolve(undefined, 'team-b', 'm').sloTtftMs, 800, 'an annotation is capped at the floor');
  assert.match(
    c.problems.join('\n'),
    /namespace team-b: annotation kinference.io\/ttft-slo: looser than the platform floor \(\*\/platform\) allows; capped at 800ms/,
  );
  assert.equal(mayLeave(a, { tenant: 'team-a', tags: ['confidential'] }).allowed, false);
  assert.equal(mayLeave(c.resolve(undefined, 'finance', 'm'), { tenant: 'finance', tags: [] }).allowed, false);
});

test('guardrails: a namespace policy that loosens the floor is kept out, and its namespace gets the floor', () => {
  const floor = policy('*', 'platform', { overflow: { providers: ['bedrock'] }, guardrails: { overflow: 'deny' } });
  const leaky = policy('team-a', 'leaky', { overflow: { providers: ['bedrock'], deny: { tags: [] } } });
  const c = compilePolicies([floor, leaky]);
  assert.deepEqual(
    c.policies.map((p) => p.metadata.name),
    ['platform'],
  );
  assert.equal(c.rejected[0].name, 'team-a/leaky');
  assert.match(c.rejected[0].reasons.join('\n'), /spec\.overflow\.deny\.tags: may not drop pii, unscanned/);
  assert.match(
    c.rejected[0].reasons.join('\n'),
    /spec\.overflow\.providers: the platform floor \(\*\/platform\) forbids overflow/,
  );
  const resolved = c.resolve(undefined, 'team-a', 'm');
  assert.equal(resolved.name, '*/platform');
  assert.deepEqual(resolved.overflow.providers, [], 'overflow: deny empties every provider list');
});

test('without guardrails the built-in floor denies pii and unscanned', () => {
  const c = compilePolicies([
    policy('team-a', 'open', { overflow: { providers: ['bedrock'], deny: { tags: ['internal'] } } }),
  ]);
  assert.equal(c.rejected.length, 1);
  assert.match(
    c.rejected[0].reasons[0],
    /may not drop pii, unscanned: the built-in platform floor denies pii, unscanned/,
  );
});
