// The monitoring that ships in manifests/monitoring/: the Grafana dashboard holds to Grafana's
// dashboard schema (the structure @grafana/schema types, encoded here and checked against those
// types at typecheck time), the PrometheusRule and PodMonitor hold to the Prometheus Operator's
// schemas, every expression parses as PromQL, and every metric an expression names is one a running
// agent really exports on /metrics.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import type { Dashboard } from '@grafana/schema';
import { parser as promql } from '@prometheus-io/lezer-promql';
import { PodMonitor, PrometheusRule } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { schemaProblems } from '../agent/config/load.ts';
import { startOpenAIStandin, type OpenAIStandin } from './fixtures/openai-provider.ts';
import { freeUdpPort } from './helpers/process.ts';
import { gossipIdentities } from './helpers/gossip-keys.ts';
import { MODEL, startStack, type Stack } from './helpers/stack.ts';

const MONITORING = new URL('../manifests/monitoring/', import.meta.url).pathname;
const read = (name: string) => readFileSync(join(MONITORING, name), 'utf8');

// ---- Grafana's dashboard schema (dashboard kind, schemaVersion 41), closed like its CUE ----------

const closed = <T extends Record<string, TSchema>>(props: T) => Type.Object(props, { additionalProperties: false });
const DataSourceRef = closed({ type: Type.Optional(Type.String()), uid: Type.Optional(Type.String()) });
const GridPos = closed({
  h: Type.Integer({ minimum: 1 }),
  w: Type.Integer({ minimum: 1, maximum: 24 }),
  x: Type.Integer({ minimum: 0, maximum: 23 }),
  y: Type.Integer({ minimum: 0 }),
  static: Type.Optional(Type.Boolean()),
});
const Target = closed({
  refId: Type.String({ minLength: 1 }),
  datasource: Type.Optional(DataSourceRef),
  expr: Type.String({ minLength: 1 }),
  legendFormat: Type.Optional(Type.String()),
  instant: Type.Optional(Type.Boolean()),
});
const FieldConfigSource = closed({
  defaults: closed({
    unit: Type.Optional(Type.String()),
    min: Type.Optional(Type.Number()),
    max: Type.Optional(Type.Number()),
    decimals: Type.Optional(Type.Number()),
  }),
  overrides: Type.Array(
    closed({
      matcher: closed({ id: Type.String(), options: Type.Optional(Type.Unknown()) }),
      properties: Type.Array(closed({ id: Type.String(), value: Type.Optional(Type.Unknown()) })),
    }),
  ),
});
const Panel = closed({
  type: Type.String({ minLength: 1, not: Type.Literal('row') }),
  id: Type.Integer({ minimum: 1 }),
  title: Type.String({ minLength: 1 }),
  description: Type.Optional(Type.String()),
  datasource: Type.Optional(DataSourceRef),
  gridPos: GridPos,
  fieldConfig: Type.Optional(FieldConfigSource),
  options: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
  targets: Type.Array(Target, { minItems: 1 }),
  interval: Type.Optional(Type.String()),
});
const RowPanel = closed({
  type: Type.Literal('row'),
  id: Type.Integer({ minimum: 1 }),
  title: Type.Optional(Type.String()),
  collapsed: Type.Boolean(),
  gridPos: Type.Optional(GridPos),
  panels: Type.Array(Panel),
});
const VariableModel = closed({
  name: Type.String({ minLength: 1 }),
  type: Type.Union(
    (['query', 'adhoc', 'groupby', 'constant', 'datasource', 'interval', 'textbox', 'custom', 'system'] as const).map(
      (t) => Type.Literal(t),
    ),
  ),
  label: Type.Optional(Type.String()),
  query: Type.Optional(Type.String()),
  regex: Type.Optional(Type.String()),
  hide: Type.Optional(Type.Union([Type.Literal(0), Type.Literal(1), Type.Literal(2)])),
  refresh: Type.Optional(Type.Union([Type.Literal(0), Type.Literal(1), Type.Literal(2)])),
});
const AnnotationQuery = closed({
  builtIn: Type.Optional(Type.Number()),
  datasource: DataSourceRef,
  enable: Type.Boolean(),
  hide: Type.Optional(Type.Boolean()),
  iconColor: Type.String(),
  name: Type.String(),
  type: Type.Optional(Type.String()),
});
const DashboardSchema = closed({
  title: Type.String({ minLength: 1 }),
  uid: Type.String({ minLength: 1, maxLength: 40, pattern: '^[a-zA-Z0-9_-]+$' }),
  description: Type.Optional(Type.String()),
  tags: Type.Optional(Type.Array(Type.String())),
  editable: Type.Optional(Type.Boolean()),
  graphTooltip: Type.Optional(Type.Union([Type.Literal(0), Type.Literal(1), Type.Literal(2)])),
  schemaVersion: Type.Integer({ minimum: 36 }),
  version: Type.Optional(Type.Integer()),
  refresh: Type.Optional(Type.String()),
  time: Type.Optional(closed({ from: Type.String(), to: Type.String() })),
  timezone: Type.Optional(Type.String()),
  annotations: Type.Optional(closed({ list: Type.Array(AnnotationQuery) })),
  templating: Type.Optional(closed({ list: Type.Array(VariableModel) })),
  panels: Type.Array(Type.Union([RowPanel, Panel])),
  links: Type.Optional(Type.Array(Type.Never())),
});

// The encoding may be stricter than Grafana's types, never looser: typecheck fails if a dashboard
// this schema accepts is not a Dashboard as @grafana/schema declares it.
const encodingIsNoLooser: Static<typeof DashboardSchema> extends Dashboard ? true : false = true;
void encodingIsNoLooser;

type DashboardJson = Static<typeof DashboardSchema>;
type PanelJson = Static<typeof Panel>;

/** The panels that draw (rows hold none here: they are not collapsed). */
const drawnPanels = (d: DashboardJson): PanelJson[] => d.panels.filter((p): p is PanelJson => p.type !== 'row');

// ---- PromQL ----------------------------------------------------------------------------------------

/** Grafana's built-in range variables, replaced the way Grafana does before the query is sent. */
const interpolate = (expr: string) => expr.replaceAll('$__rate_interval', '1m').replaceAll('$__range', '1h');

/** The metric names an expression selects, from its PromQL syntax tree; throws on a syntax error. */
function metricNames(expr: string): string[] {
  const text = interpolate(expr);
  const names: string[] = [];
  const errors: string[] = [];
  promql.parse(text).iterate({
    enter(node) {
      if (node.type.isError) errors.push(`at ${node.from}: ${text.slice(Math.max(0, node.from - 10), node.to + 10)}`);
      if (node.name === 'VectorSelector') {
        const id = node.node.getChild('Identifier');
        if (id) names.push(text.slice(id.from, id.to));
      }
    },
  });
  if (errors.length) throw new Error(`not PromQL: ${expr} (${errors.join('; ')})`);
  return names;
}

/** Families on an exposition page: name → type, from its `# TYPE` lines. */
function families(page: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of page.matchAll(/^# TYPE (\S+) (\S+)$/gm)) out.set(m[1]!, m[2]!);
  return out;
}

/** Does the page export this series name (a family, or a histogram's _bucket/_sum/_count)? */
function exported(name: string, page: Map<string, string>): boolean {
  if (page.has(name)) return true;
  const m = /^(.*)_(bucket|sum|count)$/.exec(name);
  return (
    m !== null &&
    ['histogram', 'summary'].includes(page.get(m[1]!) ?? '') &&
    (m[2] !== 'bucket' || page.get(m[1]!) === 'histogram')
  );
}

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
}

// ---- tests -----------------------------------------------------------------------------------------

describe('the Grafana dashboard', () => {
  const dashboard = JSON.parse(read('kinference-dashboard.json')) as DashboardJson;

  it("validates against Grafana's dashboard schema", () => {
    assert.deepEqual(schemaProblems(DashboardSchema, dashboard), []);
  });

  it('lays its panels out on the 24-column grid without overlap, with unique ids and refIds', () => {
    const ids = dashboard.panels.map((p) => p.id);
    assert.equal(new Set(ids).size, ids.length, 'panel ids are unique');
    const cells = new Set<string>();
    for (const p of dashboard.panels) {
      const { x, y, w, h } = p.gridPos!;
      assert.ok(x + w <= 24, `panel ${p.id} "${p.title}" fits the grid`);
      for (let i = x; i < x + w; i++)
        for (let j = y; j < y + h; j++) {
          assert.ok(!cells.has(`${i},${j}`), `panel ${p.id} "${p.title}" overlaps another at ${i},${j}`);
          cells.add(`${i},${j}`);
        }
    }
    for (const p of drawnPanels(dashboard)) {
      const refIds = p.targets.map((t) => t.refId);
      assert.equal(new Set(refIds).size, refIds.length, `panel "${p.title}" refIds are unique`);
    }
  });

  it('queries Prometheus through its data source variable, so it imports into any Grafana', () => {
    const variable = dashboard.templating?.list.find((v) => v.type === 'datasource');
    assert.ok(variable, 'a datasource variable');
    assert.equal(variable.query, 'prometheus');
    for (const p of drawnPanels(dashboard))
      for (const t of p.targets) assert.deepEqual(t.datasource, { type: 'prometheus', uid: `\${${variable.name}}` });
  });

  it('fails validation for a panel without a grid position or a query without a refId (the check can fail)', () => {
    const broken = structuredClone(dashboard) as { panels: Record<string, unknown>[] };
    const panel = broken.panels.find((p) => p.type !== 'row')!;
    delete panel.gridPos;
    (panel.targets as Record<string, unknown>[])[0]!.refId = undefined;
    const problems = schemaProblems(DashboardSchema, broken);
    assert.ok(problems.length >= 1, 'problems found');
  });
});

describe('the PrometheusRule and PodMonitor', () => {
  const rule = parseYaml(read('prometheusrule.yaml')) as { spec: { groups: { name: string; rules: Rule[] }[] } };
  const rules = rule.spec.groups.flatMap((g) => g.rules);

  it("validate against the Prometheus Operator's schemas", () => {
    new PrometheusRule(rule as ConstructorParameters<typeof PrometheusRule>[0]).validate();
    new PodMonitor(parseYaml(read('podmonitor.yaml')) as ConstructorParameters<typeof PodMonitor>[0]).validate();
  });

  it('alert on SLO attainment, overflow share, an exhausted budget, stale pods, unsynced gossip and open breakers', () => {
    const alerts = rules.map((r) => r.alert);
    for (const name of [
      'KinferenceSloAttainmentLow',
      'KinferenceOverflowShareHigh',
      'KinferenceOverflowBudgetExhausted',
      'KinferencePodsStale',
      'KinferenceGossipUnsynced',
      'KinferenceProviderBreakerOpen',
    ])
      assert.ok(alerts.includes(name), `${name} is defined`);
  });

  it('catches a PromQL syntax error and a misspelt metric (the check can fail)', async () => {
    assert.throws(() => metricNames('sum(rate(kinference_requests_total[5m])'), /not PromQL/);
    const page = families('# TYPE kinference_requests_total counter\n# TYPE kinference_x_seconds histogram\n');
    assert.ok(exported('kinference_x_seconds_bucket', page));
    assert.ok(!exported('kinference_request_total', page));
    assert.ok(!exported('kinference_requests_total_bucket', page));
  });
});

describe('every expression in the dashboard and the alerts names metrics a running agent exports', () => {
  let stack: Stack;
  let provider: OpenAIStandin;
  let page: Map<string, string>;

  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kinference-monitoring-'));
    writeFileSync(join(dir, 'gossip.key'), 'test-gossip-key-0123456789abcdef');
    provider = await startOpenAIStandin();
    const [own, peer] = [await freeUdpPort(), await freeUdpPort()];
    // Gossip, a provider and a budget, so every optional part of /metrics is there.
    stack = await startStack({
      config: {
        listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0', gossip: `127.0.0.1:${own}` },
        peers: [`127.0.0.1:${peer}`],
        // The peer's public key: static peers are trusted only for what they sign (gossip.peerKeys).
        gossip: { key: { file: join(dir, 'gossip.key') }, peerKeys: [gossipIdentities('node-b')['node-b'].peerKey] },
        providers: [{ name: 'hosted', kind: 'openai', endpoint: provider.url, models: { [MODEL]: 'hosted-llama' } }],
        policies: [
          {
            metadata: { name: 'default', namespace: '*' },
            spec: {
              slo: { ttft: '500ms' },
              overflow: { providers: ['hosted'], budget: { limits: [{ window: 'minute', tokens: 1000 }] } },
            },
          },
        ],
      },
    });
    page = families(await (await fetch(`${stack.admin}/metrics`)).text());
  });
  after(async () => {
    await stack?.close();
    await provider?.close();
  });

  it('the dashboard', () => {
    const dashboard = JSON.parse(read('kinference-dashboard.json')) as DashboardJson;
    const missing: string[] = [];
    let seen = 0;
    for (const p of drawnPanels(dashboard))
      for (const t of p.targets)
        for (const name of metricNames(t.expr)) {
          seen++;
          if (!exported(name, page)) missing.push(`${p.title}: ${name}`);
        }
    assert.ok(seen >= 20, `the dashboard names metrics (${seen})`);
    assert.deepEqual(missing, []);
  });

  it('counts local pods by state and reports each provider breaker (the series the alerts read)', async () => {
    const text = await (await fetch(`${stack.admin}/metrics`)).text();
    assert.match(text, /^kinference_local_pods\{state="fresh"\} 1$/m);
    assert.match(text, /^kinference_local_pods\{state="stale"\} 0$/m);
    assert.match(text, /^kinference_provider_breaker_open\{provider="hosted"\} 0$/m);
  });

  it('the alerts', () => {
    const rule = parseYaml(read('prometheusrule.yaml')) as { spec: { groups: { rules: Rule[] }[] } };
    for (const r of rule.spec.groups.flatMap((g) => g.rules)) {
      const names = metricNames(r.expr);
      assert.ok(names.length > 0, `${r.alert} names a metric`);
      for (const name of names) assert.ok(exported(name, page), `${r.alert}: ${name} is exported`);
    }
  });
});
