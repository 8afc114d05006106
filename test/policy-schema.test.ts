import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { CustomResourceDefinition } from 'kubernetes-models/apiextensions.k8s.io/v1/CustomResourceDefinition';
import { loadPolicies, validatePolicy, type PolicyError } from '../agent/policy/validate.ts';
import { CRD_FILE, inferencePolicyOpenAPISchema, renderCrd, renderCrdYaml } from '../agent/policy/crd.ts';

// The InferencePolicy example of docs/policy.md, as written there.
const POLICY_EXAMPLE = `
apiVersion: kinference.io/v1alpha1
kind: InferencePolicy
metadata: {name: team-a-llama, namespace: team-a}
spec:
  models: [llama-3-8b]          # default: every model
  tenants: [team-a]             # default: every tenant (tenant = caller's namespace)
  slo:
    ttft: 500ms                 # a pod predicted slower than this is not a candidate
  exclude:                      # a pod matching any rule is bypassed
    - metric: queued            # queued | running | kvCache | predictedTTFT
      above: 2
      window: 30s               # average over this window
  overflow:
    providers: [bedrock, databricks]   # tried in order; empty or absent: never leaves
    deny:
      tags: [pii]               # a request with any of these tags never leaves
      tenants: [finance]
  wait:
    max: 2s
`;

function example(): Record<string, unknown> & { spec: Record<string, unknown> } {
  return parse(POLICY_EXAMPLE) as Record<string, unknown> & { spec: Record<string, unknown> };
}

function errorsOf(doc: unknown, requireTypeMeta = false): PolicyError[] {
  const result = validatePolicy(doc, { requireTypeMeta });
  assert.equal(result.ok, false, 'expected the document to be invalid');
  return result.errors;
}

function errorAt(errors: PolicyError[], path: string): string {
  const error = errors.find((e) => e.path === path);
  assert.ok(error, `no error at ${path}; got ${JSON.stringify(errors)}`);
  return error.message;
}

test('accepts the documented policy example, with and without type meta required', () => {
  assert.equal(validatePolicy(example(), { requireTypeMeta: true }).ok, true);
  assert.equal(validatePolicy(example()).ok, true);
});

test('accepts the static-config form: bare metadata and spec, namespace "*", empty spec', () => {
  assert.equal(validatePolicy({ metadata: { name: 'default', namespace: '*' }, spec: {} }).ok, true);
  assert.equal(validatePolicy({ metadata: { name: 'default', namespace: '*' }, spec: { exclude: [] } }).ok, true);
});

test('accepts what an informer hands over: extra metadata and a status', () => {
  const doc = example();
  doc.metadata = { name: 'p', namespace: 'team-a', uid: 'abc', resourceVersion: '7', labels: { a: 'b' } };
  doc.status = { observedGeneration: 3, anything: ['goes'] };
  assert.equal(validatePolicy(doc).ok, true);
});

test('accepts every metric and fractional kvCache', () => {
  for (const metric of ['queued', 'running', 'kvCache', 'predictedTTFT']) {
    const doc = example();
    doc.spec.exclude = [{ metric, above: metric === 'kvCache' ? 0.9 : 800, window: '1.5s' }];
    assert.equal(validatePolicy(doc).ok, true, metric);
  }
});

test('a typo in a key is an error naming the path and suggesting the field', () => {
  const doc = example();
  doc.spec.sloo = doc.spec.slo;
  delete doc.spec.slo;
  const message = errorAt(errorsOf(doc), 'spec.sloo');
  assert.match(message, /unknown field/);
  assert.match(message, /did you mean "slo"\?/);
});

test('unknown keys are errors at every level', () => {
  const doc = example();
  (doc.spec.overflow as Record<string, unknown>).providerz = ['x'];
  (doc.spec.exclude as Record<string, unknown>[])[0].windw = '30s';
  (doc.spec.overflow as { deny: Record<string, unknown> }).deny.tag = ['pii'];
  doc.extra = 1;
  const errors = errorsOf(doc);
  errorAt(errors, 'spec.overflow.providerz');
  errorAt(errors, 'spec.exclude[0].windw');
  assert.match(errorAt(errors, 'spec.overflow.deny.tag'), /did you mean "tags"/);
  errorAt(errors, 'extra');
});

test('a bad duration names the path, a duration like 30s, and what was found', () => {
  const doc = example();
  (doc.spec.exclude as Record<string, unknown>[])[0].window = '30 seconds';
  assert.equal(errorAt(errorsOf(doc), 'spec.exclude[0].window'), 'expected a duration like 30s, found "30 seconds"');
});

test('durations are checked wherever they appear', () => {
  const doc = example();
  doc.spec.slo = { ttft: 500 };
  doc.spec.wait = { max: '2 s' };
  const errors = errorsOf(doc);
  assert.equal(errorAt(errors, 'spec.slo.ttft'), 'expected a duration like 30s, found 500');
  assert.equal(errorAt(errors, 'spec.wait.max'), 'expected a duration like 30s, found "2 s"');
});

test('a bad metric lists the metrics', () => {
  const doc = example();
  (doc.spec.exclude as Record<string, unknown>[])[0].metric = 'queue';
  assert.equal(
    errorAt(errorsOf(doc), 'spec.exclude[0].metric'),
    'expected one of queued, running, kvCache, predictedTTFT, found "queue"',
  );
});

test('wrong types say what was expected and found', () => {
  const doc = example();
  doc.spec.models = 'llama-3-8b';
  (doc.spec.exclude as Record<string, unknown>[])[0].above = '2';
  (doc.spec.overflow as Record<string, unknown>).providers = 'bedrock';
  const errors = errorsOf(doc);
  assert.equal(errorAt(errors, 'spec.models'), 'expected a non-empty list of names, found "llama-3-8b"');
  assert.equal(errorAt(errors, 'spec.exclude[0].above'), 'expected a number ≥ 0, found "2"');
  assert.equal(errorAt(errors, 'spec.overflow.providers'), 'expected a list of provider names, found "bedrock"');
});

test('missing fields are named once', () => {
  const errors = errorsOf({ metadata: { name: 'x', namespace: 'y' }, spec: { exclude: [{ metric: 'queued' }] } });
  assert.equal(errorAt(errors, 'spec.exclude[0].above'), 'missing, expected a number ≥ 0');
  assert.equal(errorAt(errors, 'spec.exclude[0].window'), 'missing, expected a duration like 30s');
  assert.equal(errors.filter((e) => e.path === 'spec.exclude[0].above').length, 1);
  assert.match(errorAt(errorsOf({ metadata: { name: 'x' }, spec: {} }), 'metadata.namespace'), /missing/);
  assert.match(errorAt(errorsOf({ metadata: { name: 'x', namespace: 'y' } }), 'spec'), /missing, expected an object/);
});

test('policy files must say apiVersion and kind, and say them right', () => {
  const bare = { metadata: { name: 'x', namespace: 'y' }, spec: {} };
  const errors = errorsOf(bare, true);
  assert.equal(errorAt(errors, 'apiVersion'), 'missing, expected "kinference.io/v1alpha1"');
  assert.equal(errorAt(errors, 'kind'), 'missing, expected "InferencePolicy"');
  assert.equal(
    errorAt(errorsOf({ ...bare, apiVersion: 'kinference.io/v1' }), 'apiVersion'),
    'expected "kinference.io/v1alpha1", found "kinference.io/v1"',
  );
});

test('semantic rules: kvCache is a fraction; deny tags use the classifier charset; lists are not empty', () => {
  const doc = example();
  doc.spec.exclude = [{ metric: 'kvCache', above: 90, window: '30s' }];
  (doc.spec.overflow as { deny: Record<string, unknown> }).deny.tags = ['PII'];
  doc.spec.tenants = [];
  const errors = errorsOf(doc);
  assert.equal(errorAt(errors, 'spec.exclude[0].above'), 'expected a fraction between 0 and 1 for kvCache, found 90');
  assert.equal(errorAt(errors, 'spec.overflow.deny.tags[0]'), 'expected a lowercase tag of a-z 0-9 . _ -, found "PII"');
  assert.equal(errorAt(errors, 'spec.tenants'), 'expected a non-empty list of names, found an empty list');
});

test('a non-object document is one error at the root', () => {
  assert.deepEqual(
    errorsOf('hello').map((e) => e.path),
    [''],
  );
  assert.deepEqual(
    errorsOf(null).map((e) => e.message),
    ['expected an object, found null'],
  );
});

test('loadPolicies keeps the valid and reports the invalid by name', () => {
  const bad = example();
  (bad.spec.slo as Record<string, unknown>).ttft = 'fast';
  bad.metadata = { name: 'broken', namespace: 'team-b' };
  const { policies, errors } = loadPolicies([example(), bad]);
  assert.equal(policies.length, 1);
  assert.equal(errors.length, 1);
  assert.equal(errors[0].name, 'team-b/broken');
  assert.equal(errors[0].index, 1);
  assert.equal(errors[0].errors[0].path, 'spec.slo.ttft');
});

// --- the CRD ---

/** Keywords that a Kubernetes structural schema rejects or that we must never emit. */
const FORBIDDEN = [
  '$id',
  '$schema',
  '$ref',
  'additionalProperties',
  'const',
  'anyOf',
  'oneOf',
  'allOf',
  'not',
  'uniqueItems',
  'expected',
  'default',
];

function walk(
  schema: Record<string, unknown>,
  path: string,
  visit: (s: Record<string, unknown>, path: string) => void,
): void {
  visit(schema, path);
  for (const [name, child] of Object.entries((schema.properties ?? {}) as Record<string, Record<string, unknown>>)) {
    walk(child, `${path}.${name}`, visit);
  }
  if (schema.items) walk(schema.items as Record<string, unknown>, `${path}[]`, visit);
}

test('the OpenAPI schema is structural: every node typed, no forbidden keywords', () => {
  walk(inferencePolicyOpenAPISchema(), '', (schema, path) => {
    assert.ok(typeof schema.type === 'string', `${path || '(root)'} has no type`);
    for (const key of FORBIDDEN) assert.ok(!(key in schema), `${path} has ${key}`);
    if (schema.type === 'object' && path !== '.metadata') assert.ok(schema.properties, `${path} has no properties`);
  });
});

test('the OpenAPI schema keeps enums, patterns and required from the one source', () => {
  const spec = inferencePolicyOpenAPISchema().properties as Record<string, Record<string, unknown>>;
  const rule = (spec.spec.properties as Record<string, Record<string, unknown>>).exclude.items as Record<
    string,
    unknown
  >;
  const props = rule.properties as Record<string, Record<string, unknown>>;
  assert.deepEqual(props.metric.enum, ['queued', 'running', 'kvCache', 'predictedTTFT']);
  assert.equal(props.window.pattern, '^[0-9]+(\\.[0-9]+)?(ms|s|m|h)$');
  assert.deepEqual(rule.required, ['metric', 'above', 'window']);
  assert.equal(new RegExp(props.window.pattern as string).test('30s'), true);
  assert.equal(new RegExp(props.window.pattern as string).test('30 seconds'), false);
});

test('the CRD is a valid apiextensions.k8s.io/v1 CustomResourceDefinition', () => {
  const crd = new CustomResourceDefinition(renderCrd() as never);
  crd.validate();
  const spec = renderCrd().spec as Record<string, unknown>;
  assert.equal(spec.group, 'kinference.io');
  assert.equal(spec.scope, 'Namespaced');
  assert.deepEqual((spec.names as Record<string, unknown>).shortNames, ['ipol']);
  const [version] = spec.versions as Record<string, unknown>[];
  assert.equal(version.name, 'v1alpha1');
  assert.equal(version.served, true);
  assert.equal(version.storage, true);
  assert.deepEqual(version.subresources, { status: {} });
  assert.deepEqual(
    (version.additionalPrinterColumns as { name: string }[]).map((c) => c.name),
    ['Models', 'SLO', 'Overflow providers', 'Age'],
  );
});

test(`${CRD_FILE} is the current rendering (run: npx node agent/policy/render-crd.ts)`, () => {
  const onDisk = readFileSync(new URL(`../${CRD_FILE}`, import.meta.url), 'utf8');
  assert.equal(onDisk, renderCrdYaml());
});

test('an exclusion window longer than the history the agent keeps (5m) is an error, not a silent clamp', async () => {
  const { validatePolicy } = await import('../agent/policy/validate.ts');
  const result = validatePolicy({
    metadata: { name: 'p', namespace: 'ns' },
    spec: { exclude: [{ metric: 'queued', above: 2, window: '10m' }] },
  });
  assert.equal(result.ok, false);
  assert.deepEqual(
    result.errors.map((e) => `${e.path}: ${e.message}`),
    ['spec.exclude[0].window: expected a window of at most 5m, found "10m"'],
  );
  assert.equal(
    validatePolicy({
      metadata: { name: 'p', namespace: 'ns' },
      spec: { exclude: [{ metric: 'queued', above: 2, window: '5m' }] },
    }).ok,
    true,
  );
});
