import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runPolicyCheck } from '../agent/cli/policy-check.ts';

const dir = mkdtempSync(join(tmpdir(), 'kinference-policy-check-'));

function file(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

async function check(...files: string[]): Promise<{ code: number; out: string[]; err: string[] }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runPolicyCheck(files, { log: (l) => out.push(l), error: (l) => err.push(l) });
  return { code, out, err };
}

const GOOD = `apiVersion: kinference.io/v1alpha1
kind: InferencePolicy
metadata: {name: team-a, namespace: team-a}
spec:
  models: [llama-3-8b]
  slo: {ttft: 500ms, attainment: 99.9%}
  exclude:
    - {metric: queued, above: 2, window: 30s}
  overflow:
    providers: [bedrock, databricks]
    deny: {tags: [pii, unscanned], tenants: [finance]}
  wait: {max: 2s}
---
apiVersion: kinference.io/v1alpha1
kind: InferencePolicy
metadata: {name: default, namespace: team-a}
spec: {}
---
`;

test('valid policies: exit 0 and "ok: N policies"', async () => {
  const r = await check(file('good.yaml', GOOD));
  assert.equal(r.code, 0);
  assert.deepEqual(r.err, []);
  assert.deepEqual(r.out, ['ok: 2 policies']);
});

test('an invalid field: exit 1, the file, doc number, policy, path, expected and found', async () => {
  const path = file(
    'bad-window.yaml',
    `${GOOD}apiVersion: kinference.io/v1alpha1
kind: InferencePolicy
metadata: {name: slow, namespace: team-b}
spec:
  exclude:
    - {metric: queued, above: 2, window: 30 seconds}
`,
  );
  const r = await check(path);
  assert.equal(r.code, 1);
  assert.equal(
    r.err[0],
    `${path}: doc 3 (team-b/slow): spec.exclude[0].window: expected a duration like 30s, found "30 seconds" (line 24)`,
  );
  assert.equal(r.err.at(-1), '1 error');
});

test('an SLO attainment that is not a percentage below 100% fails the check, in a policy and in a namespace annotation', async () => {
  const path = file(
    'bad-attainment.yaml',
    `${GOOD}apiVersion: kinference.io/v1alpha1
kind: InferencePolicy
metadata: {name: sure, namespace: team-b}
spec:
  slo: {attainment: 100%}
---
apiVersion: v1
kind: Namespace
metadata:
  name: team-c
  annotations:
    kinference.io/slo-attainment: "0.99"
`,
  );
  const r = await check(path);
  assert.equal(r.code, 1);
  assert.equal(
    r.err[0],
    `${path}: doc 3 (team-b/sure): spec.slo.attainment: expected a percentage above 0% and below 100%, like 99%, found "100%" (line 23)`,
  );
  assert.match(
    r.err.join('\n'),
    /kinference\.io\/slo-attainment"\]: expected a percentage above 0% and below 100% like 99%, found "0\.99"/,
  );
});

test('a typo in a key is caught with a suggestion', async () => {
  const path = file(
    'typo.yaml',
    `apiVersion: kinference.io/v1alpha1
kind: InferencePolicy
metadata: {name: p, namespace: ns}
spec:
  sloo: {ttft: 500ms}
`,
  );
  const r = await check(path);
  assert.equal(r.code, 1);
  assert.match(r.err[0], /doc 1 \(ns\/p\): spec\.sloo: unknown field, .*\(did you mean "slo"\?\) \(line 5\)$/);
});

test('other kinds are errors; a List of policies is fine', async () => {
  const path = file(
    'mixed.yaml',
    `apiVersion: v1
kind: ConfigMap
metadata: {name: x}
---
apiVersion: v1
kind: List
items:
  - apiVersion: kinference.io/v1alpha1
    kind: InferencePolicy
    metadata: {name: a, namespace: ns}
    spec: {}
  - apiVersion: kinference.io/v1alpha1
    kind: InferencePolicy
    metadata: {name: b, namespace: ns}
    spec: {wait: {max: forever}}
`,
  );
  const r = await check(path);
  assert.equal(r.code, 1);
  assert.equal(
    r.err[0],
    `${path}: doc 1: kind: expected InferencePolicy (or a List of them), found "ConfigMap" (line 2)`,
  );
  assert.equal(
    r.err[1],
    `${path}: doc 2 items[1] (ns/b): spec.wait.max: expected a duration like 30s, found "forever" (line 15)`,
  );
});

test('policy files must carry apiVersion and kind', async () => {
  const path = file('bare.yaml', 'metadata: {name: a, namespace: ns}\nspec: {}\n');
  const r = await check(path);
  assert.equal(r.code, 1);
  assert.match(r.err[0], /doc 1: kind: expected InferencePolicy \(or a List of them\), found nothing/);
});

test('ties across files are reported with both places', async () => {
  const a = file('tie-a.yaml', GOOD);
  const b = file(
    'tie-b.yaml',
    `apiVersion: kinference.io/v1alpha1
kind: InferencePolicy
metadata: {name: other, namespace: team-a}
spec: {models: [llama-3-8b, mistral-7b]}
`,
  );
  const r = await check(a, b);
  assert.equal(r.code, 1);
  assert.equal(r.err.length, 2);
  assert.match(
    r.err[0],
    new RegExp(
      `^${b}: doc 1 \\(team-a/other\\): spec: ambiguous: ties with team-a/team-a .*models \\[llama-3-8b\\].*\\[other: ${a}: doc 1\\]`,
    ),
  );
});

test('a Namespace that pins one of two tied policies resolves the tie; its annotations are checked', async () => {
  const policies = file(
    'pinned.yaml',
    `${GOOD}apiVersion: kinference.io/v1alpha1
kind: InferencePolicy
metadata: {name: strict, namespace: team-a}
spec: {slo: {ttft: 300ms}}
`,
  );
  const tied = await check(policies);
  assert.equal(tied.code, 1);
  const namespace = file(
    'ns.yaml',
    `apiVersion: v1
kind: Namespace
metadata:
  name: team-a
  annotations:
    kinference.io/policy: strict
---
apiVersion: v1
kind: Namespace
metadata:
  name: team-b
  annotations:
    kinference.io/ttft-slo: quick
`,
  );
  const r = await check(policies, namespace);
  assert.equal(r.code, 1);
  assert.deepEqual(r.err, [
    `${namespace}: doc 2 (namespace team-b): metadata.annotations["kinference.io/ttft-slo"]: expected a duration like 800ms, found "quick" (line 13)`,
    '1 error',
  ]);
});

test('an agent config file: its policies and namespace annotations are checked', async () => {
  const path = file(
    'agent.yaml',
    `node: node-a
policies:
  - metadata: {name: default, namespace: "*"}
    spec: {slo: {ttft: 800ms}}
  - metadata: {name: typo, namespace: team-a}
    spec: {overflow: {provider: [bedrock]}}
namespaces:
  team-a: {kinference.io/overflow: perhaps}
`,
  );
  const r = await check(path);
  assert.equal(r.code, 1);
  assert.match(
    r.err[0],
    /doc 1 policies\[1\] \(team-a\/typo\): spec\.overflow\.provider: unknown field.*did you mean "providers"\?/,
  );
  assert.match(
    r.err[1],
    /doc 1: namespaces\.team-a\["kinference\.io\/overflow"\]: expected allow or deny, found "perhaps" \(line 8\)/,
  );
});

test('warnings do not fail the check', async () => {
  // The platform's own cluster-wide policy may lower its floor; the check still warns.
  const path = file(
    'warn.yaml',
    `apiVersion: kinference.io/v1alpha1
kind: InferencePolicy
metadata: {name: open, namespace: '*'}
spec: {overflow: {providers: [bedrock], deny: {tags: [internal]}}, guardrails: {deny: {tags: [internal]}}}
`,
  );
  const r = await check(path);
  assert.equal(r.code, 0);
  assert.match(r.out[0], /spec\.overflow\.deny\.tags: warning: requests tagged pii may leave the cluster to bedrock/);
  assert.equal(r.out[1], 'ok: 1 policy, 1 warning');
});

test('unreadable files, YAML syntax errors and empty files fail', async () => {
  const missing = join(dir, 'missing.yaml');
  const broken = file('broken.yaml', 'spec: [a\n');
  const empty = file('empty.yaml', '# nothing here\n');
  const r = await check(missing, broken, empty);
  assert.equal(r.code, 1);
  assert.match(r.err[0], new RegExp(`^${missing}: cannot read: ENOENT`));
  assert.match(r.err[1], new RegExp(`^${broken}: doc 1: invalid YAML: .*\\(line \\d+\\)$`));
  assert.equal(r.err[2], `${empty}: no InferencePolicy or Namespace documents`);
});

test('no files is a usage error', async () => {
  const r = await check();
  assert.equal(r.code, 2);
  assert.match(r.err[0], /^usage: kinference policy check \[--agent-namespace NAME\] FILE/);
});

test('a namespace policy that loosens the platform floor is an error, not a warning', async () => {
  const path = file(
    'loosen.yaml',
    `apiVersion: kinference.io/v1alpha1
kind: InferencePolicy
metadata: {name: floor, namespace: '*'}
spec: {guardrails: {deny: {tags: [pii, unscanned, confidential]}, maxSloTtft: 2s, overflow: allow}}
---
apiVersion: kinference.io/v1alpha1
kind: InferencePolicy
metadata: {name: leaky, namespace: finance}
spec: {slo: {ttft: 5s}, overflow: {providers: [bedrock], deny: {tags: []}}, guardrails: {overflow: allow}}
`,
  );
  const r = await check(path);
  assert.equal(r.code, 1);
  const errors = r.err.join('\n');
  assert.match(
    errors,
    /finance\/leaky\): spec\.overflow\.deny\.tags: may not drop confidential, pii, unscanned: the platform floor \(\*\/floor\) denies/,
  );
  assert.match(
    errors,
    /finance\/leaky\): spec\.slo\.ttft: 5s is looser than the platform floor \(\*\/floor\) allows \(at most 2000ms\)/,
  );
  assert.match(errors, /finance\/leaky\): spec\.guardrails: guardrails may only be set by a cluster-wide policy/);
});

test("policies in the agent's namespace are cluster-wide: their guardrails bind the others", async () => {
  const path = file(
    'platform.yaml',
    `apiVersion: kinference.io/v1alpha1
kind: InferencePolicy
metadata: {name: platform, namespace: ops}
spec: {guardrails: {deny: {tags: [pii, unscanned, secret]}}}
---
apiVersion: kinference.io/v1alpha1
kind: InferencePolicy
metadata: {name: chat, namespace: team-a}
spec: {overflow: {providers: [bedrock], deny: {tags: [pii, unscanned]}}}
`,
  );
  const asPlatform = await check('--agent-namespace', 'ops', path);
  assert.equal(asPlatform.code, 1);
  assert.match(
    asPlatform.err[0],
    /doc 2 \(team-a\/chat\): spec\.overflow\.deny\.tags: may not drop secret: the platform floor \(\*\/platform\)/,
  );
  // Read with the default agent namespace (kinference), ops is just a namespace: its guardrails are the error.
  const asDefault = await check(path);
  assert.equal(asDefault.code, 1);
  assert.match(
    asDefault.err[0],
    /doc 1 \(ops\/platform\): spec\.guardrails: guardrails may only be set by a cluster-wide policy/,
  );
});
