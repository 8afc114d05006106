import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parse } from 'yaml';
import type { InferencePolicy, InferencePolicySpec } from '../agent/policy/schema.ts';
import { validatePolicy } from '../agent/policy/validate.ts';
import { compilePolicies } from '../agent/policy/resolve.ts';
import { priorityOf } from '../agent/budget/limits.ts';

function policy(namespace: string, name: string, spec: InferencePolicySpec): InferencePolicy {
  return { metadata: { name, namespace }, spec };
}

test('a policy states overflow budgets per window and provider, and a priority the header may raise', () => {
  const doc = parse(`
apiVersion: kinference.io/v1alpha1
kind: InferencePolicy
metadata: {name: batch, namespace: team-b}
spec:
  overflow:
    providers: [bedrock]
    budget:
      limits:
        - {window: minute, tokens: 20000, requests: 40}
        - {window: day, tokens: 2000000}
        - {window: hour, provider: bedrock, requests: 500}
  priority: {class: sheddable, header: [standard, sheddable]}
`);
  const result = validatePolicy(doc, { requireTypeMeta: true });
  assert.deepEqual(result.errors, []);
});

test('a limit that bounds nothing, a duplicate scope, a bad window or a negative count are errors naming the path', () => {
  const result = validatePolicy({
    metadata: { name: 'x', namespace: 'a' },
    spec: {
      overflow: {
        budget: {
          limits: [
            { window: 'minute' },
            { window: 'hour', tokens: 5 },
            { window: 'hour', tokens: 9 },
            { window: 'week', tokens: 1 },
            { window: 'day', requests: -1 },
          ],
        },
      },
      priority: { class: 'urgent' },
    },
  });
  assert.equal(result.ok, false);
  const byPath = Object.fromEntries(result.errors.map((e) => [e.path, e.message]));
  assert.match(byPath['spec.overflow.budget.limits[0]'], /tokens, requests or both/);
  assert.match(byPath['spec.overflow.budget.limits[2]'], /one limit per window and provider/);
  assert.match(byPath['spec.overflow.budget.limits[3].window'], /minute, hour, day/);
  assert.match(byPath['spec.overflow.budget.limits[4].requests'], /≥ 0/);
  assert.match(byPath['spec.priority.class'], /critical, standard, sheddable/);
});

const floor = policy('*', 'platform', {
  guardrails: { overflowBudget: { limits: [{ window: 'hour', tokens: 100_000 }] } },
});

test('the floor caps every tenant, also those whose policy sets no budget; a tighter namespace limit adds to it', () => {
  const tight = policy('team-a', 'a', {
    overflow: {
      providers: ['bedrock'],
      budget: {
        limits: [
          { window: 'hour', tokens: 10_000 },
          { window: 'minute', requests: 5 },
        ],
      },
    },
  });
  const open = policy('team-b', 'b', { overflow: { providers: ['bedrock'] } });
  const c = compilePolicies([floor, tight, open]);
  assert.deepEqual(c.rejected, []);
  assert.deepEqual(c.resolve(undefined, 'team-a', 'm').budget, [
    { window: 'hour', tokens: 10_000 },
    { window: 'minute', requests: 5 },
    { window: 'hour', tokens: 100_000 },
  ]);
  assert.deepEqual(c.resolve(undefined, 'team-b', 'm').budget, [{ window: 'hour', tokens: 100_000 }]);
  assert.deepEqual(c.resolve(undefined, 'team-c', 'm').budget, [{ window: 'hour', tokens: 100_000 }]);
});

test('a namespace limit looser than the floor for the same window is rejected, and says why', () => {
  const loose = policy('team-a', 'a', {
    overflow: { providers: ['bedrock'], budget: { limits: [{ window: 'hour', tokens: 500_000 }] } },
  });
  const c = compilePolicies([floor, loose]);
  assert.equal(c.rejected.length, 1);
  assert.match(
    c.rejected[0].reasons[0],
    /spec\.overflow\.budget: hour: 500000 tokens is looser than the floor's 100000/,
  );
  // A limit for another window or one provider does not loosen the floor's.
  const other = policy('team-a', 'a', {
    overflow: { providers: ['bedrock'], budget: { limits: [{ window: 'day', tokens: 500_000 }] } },
  });
  assert.deepEqual(compilePolicies([floor, other]).rejected, []);
});

test('the priority header counts only for classes the policy allows', () => {
  const p = compilePolicies([
    policy('team-a', 'a', { priority: { class: 'standard', header: ['sheddable'] } }),
  ]).resolve(undefined, 'team-a', 'm');
  assert.deepEqual(p.priority, { class: 'standard', header: ['sheddable'] });
  assert.equal(priorityOf(p.priority!, 'Sheddable'), 'sheddable');
  assert.equal(priorityOf(p.priority!, 'critical'), 'standard');
  assert.equal(priorityOf(p.priority!, undefined), 'standard');
});
