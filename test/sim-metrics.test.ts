// The simulator's /metrics for each engine: valid Prometheus text, the real family names, labels
// and buckets. The format checker below is written from the exposition spec, independently of
// the renderer it checks.

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startSim, type SimServer } from '../shared/sim/server.ts';
import { SimEngine } from '../shared/sim/engine.ts';
import { VirtualClock } from '../shared/sim/clock.ts';
import { BUCKETS } from '../shared/sim/buckets.ts';
import { renderMetrics } from '../shared/sim/metrics.ts';

// ---- an independent checker for the Prometheus text format (0.0.4) ----

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

interface ParsedFamily {
  name: string;
  type: string;
  help?: string;
  samples: Sample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const GO_FLOAT = /^(?:[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN)$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

function parseValue(text: string, where: string): number {
  assert.match(text, GO_FLOAT, `${where}: bad value "${text}"`);
  if (/^[+]?Inf$/.test(text)) return Infinity;
  if (text === '-Inf') return -Infinity;
  return Number(text);
}

/** Parses `{a="x",b="y\"z"}` starting at `i` (on the `{`); returns labels and the index after `}`. */
function parseLabels(line: string, i: number, where: string): [Record<string, string>, number] {
  const labels: Record<string, string> = {};
  i++; // {
  while (line[i] !== '}') {
    const eq = line.indexOf('=', i);
    assert.ok(eq > i, `${where}: label without "="`);
    const name = line.slice(i, eq);
    assert.match(name, LABEL_NAME, `${where}: bad label name "${name}"`);
    assert.ok(!(name in labels), `${where}: duplicate label "${name}"`);
    assert.equal(line[eq + 1], '"', `${where}: label value must be quoted`);
    let value = '';
    let j = eq + 2;
    for (; j < line.length && line[j] !== '"'; j++) {
      if (line[j] === '\\') {
        const next = line[++j];
        assert.ok(next === '\\' || next === '"' || next === 'n', `${where}: bad escape "\\${next}"`);
        value += next === 'n' ? '\n' : next;
      } else value += line[j];
    }
    assert.equal(line[j], '"', `${where}: unterminated label value`);
    labels[name] = value;
    i = j + 1;
    if (line[i] === ',') i++;
    else assert.equal(line[i], '}', `${where}: expected "," or "}" after a label`);
  }
  return [labels, i + 1];
}

/** The family a sample belongs to: its own name, or a histogram/summary base name. */
function familyOf(name: string, families: Map<string, ParsedFamily>): ParsedFamily | undefined {
  const own = families.get(name);
  if (own && own.type !== 'histogram' && own.type !== 'summary') return own;
  const m = /^(.*)_(bucket|sum|count)$/.exec(name);
  if (!m) return undefined;
  const base = families.get(m[1]);
  if (base?.type === 'histogram') return base;
  if (base?.type === 'summary' && m[2] !== 'bucket') return base;
  return undefined;
}

function checkExposition(text: string): Map<string, ParsedFamily> {
  const families = new Map<string, ParsedFamily>();
  const described = new Map<string, { help?: string; type?: string }>();
  const seen = new Set<string>();
  const closed = new Set<string>();
  let current: string | undefined;
  assert.ok(text.endsWith('\n'), 'the body ends with a newline');

  text.split('\n').forEach((line, index) => {
    const where = `line ${index + 1}`;
    if (line === '') return;
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+)(?: (.*))?$/.exec(line);
      if (!m) return; // a plain comment
      const [, kind, name, rest = ''] = m;
      assert.match(name, METRIC_NAME, `${where}: bad metric name "${name}"`);
      assert.ok(!families.get(name)?.samples.length, `${where}: ${kind} for ${name} after its samples`);
      assert.ok(!closed.has(name), `${where}: ${name} described again after another family`);
      const d = described.get(name) ?? {};
      if (kind === 'HELP') {
        assert.equal(d.help, undefined, `${where}: second HELP for ${name}`);
        d.help = rest;
      } else {
        assert.equal(d.type, undefined, `${where}: second TYPE for ${name}`);
        assert.ok(TYPES.has(rest), `${where}: unknown type "${rest}"`);
        d.type = rest;
        families.set(name, { name, type: rest, help: d.help, samples: [] });
      }
      described.set(name, d);
      if (current !== undefined && current !== name) closed.add(current);
      current = name;
      return;
    }
    const nameEnd = line.search(/[{ ]/);
    assert.ok(nameEnd > 0, `${where}: no metric name`);
    const name = line.slice(0, nameEnd);
    assert.match(name, METRIC_NAME, `${where}: bad metric name "${name}"`);
    let labels: Record<string, string> = {};
    let i = nameEnd;
    if (line[i] === '{') [labels, i] = parseLabels(line, i, where);
    assert.equal(line[i], ' ', `${where}: expected a space before the value`);
    const [valueText, timestamp, extra] = line.slice(i + 1).split(' ');
    assert.equal(extra, undefined, `${where}: trailing garbage`);
    if (timestamp !== undefined) assert.match(timestamp, /^-?\d+$/, `${where}: bad timestamp`);
    const value = parseValue(valueText, where);

    const family = familyOf(name, families);
    assert.ok(family, `${where}: sample ${name} has no TYPE before it`);
    assert.ok(!closed.has(family.name), `${where}: samples of ${family.name} are not contiguous`);
    if (current !== family.name && current !== undefined) closed.add(current);
    current = family.name;
    const key = `${name}${JSON.stringify(Object.entries(labels).sort())}`;
    assert.ok(!seen.has(key), `${where}: duplicate series ${key}`);
    seen.add(key);
    family.samples.push({ name, labels, value });
  });

  for (const family of families.values()) if (family.type === 'histogram') checkHistogram(family);
  return families;
}

function checkHistogram(f: ParsedFamily): void {
  const groups = new Map<string, { buckets: [number, number][]; sum?: number; count?: number }>();
  for (const s of f.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    const g = groups.get(key) ?? { buckets: [] };
    groups.set(key, g);
    if (s.name === `${f.name}_bucket`) {
      assert.ok(le !== undefined, `${f.name}: bucket without le`);
      g.buckets.push([parseValue(le, `${f.name} le`), s.value]);
    } else if (s.name === `${f.name}_sum`) g.sum = s.value;
    else g.count = s.value;
  }
  for (const [key, g] of groups) {
    const where = `${f.name}${key}`;
    assert.ok(g.buckets.length > 0, `${where}: no buckets`);
    assert.equal(g.buckets.at(-1)![0], Infinity, `${where}: the last bucket is +Inf`);
    for (let i = 1; i < g.buckets.length; i++) {
      assert.ok(g.buckets[i][0] > g.buckets[i - 1][0], `${where}: le must ascend`);
      assert.ok(g.buckets[i][1] >= g.buckets[i - 1][1], `${where}: bucket counts must be cumulative`);
    }
    assert.notEqual(g.sum, undefined, `${where}: no _sum`);
    assert.equal(g.count, g.buckets.at(-1)![1], `${where}: _count equals the +Inf bucket`);
  }
}

// ---- the simulator's /metrics ----

async function scrapeAfterTraffic(sim: SimServer): Promise<{ text: string; headers: Headers }> {
  const ask = (body: Record<string, unknown>) =>
    fetch(sim.url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'llama-3-8b', messages: [{ role: 'user', content: 'Hello, pod!' }], ...body }),
    }).then((r) => r.text());
  await Promise.all([ask({ max_tokens: 4 }), ask({ max_tokens: 6, stream: true })]);
  const res = await fetch(sim.url + '/metrics');
  assert.equal(res.status, 200);
  return { text: await res.text(), headers: res.headers };
}

const FAST = { stepBaseMs: 1, decodeMsPerSeq: 0.1, prefillMsPerToken: 0.005 };

function valueOf(families: Map<string, ParsedFamily>, name: string, labels: Record<string, string> = {}): number {
  const family = familyOf(name, families);
  assert.ok(family, `no family for ${name}`);
  const sample = family.samples.find(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  );
  assert.ok(sample, `no sample ${name} ${JSON.stringify(labels)}`);
  return sample.value;
}

describe('the exposition checker', () => {
  test('accepts the spec’s edge cases and rejects broken text', () => {
    checkExposition(
      '# HELP x_total A counter\n# TYPE x_total counter\nx_total{a="q\\"uote,}= ok",} 1.7e+09 1700000000000\n' +
        '# a comment\n# TYPE h histogram\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_count 2\nh_sum NaN\n',
    );
    const broken = [
      'x 1\n', // no TYPE
      '# TYPE x gauge\nx{a=b} 1\n', // unquoted label
      '# TYPE x gauge\nx 1\n# HELP x late\n', // HELP after samples
      '# TYPE h histogram\nh_bucket{le="2"} 1\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 1\nh_count 1\nh_sum 0\n',
      '# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 2\nh_count 3\nh_sum 0\n',
      '# TYPE h histogram\nh_bucket{le="1"} 1\nh_count 1\nh_sum 0\n', // no +Inf
      '# TYPE x gauge\n# TYPE y gauge\nx 1\ny 1\nx{a="b"} 2\n', // not contiguous
      '# TYPE x gauge\nx 1,5\n',
    ];
    for (const text of broken) assert.throws(() => checkExposition(text), Error, JSON.stringify(text));
  });
});

describe('vLLM /metrics', () => {
  test('is valid Prometheus text with vLLM V1 names, sorted labels, buckets and _created', async () => {
    const sim = await startSim({ engine: 'vllm', seed: 1, latency: FAST });
    try {
      const { text, headers } = await scrapeAfterTraffic(sim);
      assert.match(headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
      const families = checkExposition(text);
      const expected: Record<string, string> = {
        'vllm:num_requests_running': 'gauge',
        'vllm:num_requests_waiting': 'gauge',
        'vllm:kv_cache_usage_perc': 'gauge',
        'vllm:time_to_first_token_seconds': 'histogram',
        'vllm:inter_token_latency_seconds': 'histogram',
        'vllm:e2e_request_latency_seconds': 'histogram',
        'vllm:request_queue_time_seconds': 'histogram',
        'vllm:prompt_tokens_total': 'counter',
        'vllm:generation_tokens_total': 'counter',
        'vllm:request_success_total': 'counter',
        'vllm:num_preemptions_total': 'counter',
        'vllm:prompt_tokens_created': 'gauge',
        'vllm:request_success_created': 'gauge',
        'vllm:time_to_first_token_seconds_created': 'gauge',
        'vllm:e2e_request_latency_seconds_created': 'gauge',
      };
      for (const [name, type] of Object.entries(expected)) assert.equal(families.get(name)?.type, type, name);
      assert.ok([...families.keys()].some((n) => n.startsWith('python_gc_')));
      assert.ok([...families.keys()].some((n) => n.startsWith('process_')));
      assert.ok(!families.has('process_cpu_seconds_created'), 'custom collectors have no _created');

      // Labels as the Python client writes them: engine, model_name, sorted.
      const l = { engine: '0', model_name: 'llama-3-8b' };
      assert.match(text, /^vllm:num_requests_running\{engine="0",model_name="llama-3-8b"\} 0\.0$/m);
      assert.match(
        text,
        /^vllm:request_success_total\{engine="0",finished_reason="length",model_name="llama-3-8b"\} 2\.0$/m,
      );
      for (const f of families.values()) {
        for (const s of f.samples) {
          const keys = Object.keys(s.labels);
          assert.deepEqual(keys, [...keys].sort(), `${s.name} labels sorted`);
        }
      }
      const ttftLe = families
        .get('vllm:time_to_first_token_seconds')!
        .samples.filter((s) => s.name.endsWith('_bucket'))
        .map((s) => s.labels.le);
      assert.deepEqual(ttftLe, [
        '0.001',
        '0.005',
        '0.01',
        '0.02',
        '0.04',
        '0.06',
        '0.08',
        '0.1',
        '0.25',
        '0.5',
        '0.75',
        '1.0',
        '2.5',
        '5.0',
        '7.5',
        '10.0',
        '20.0',
        '40.0',
        '80.0',
        '160.0',
        '640.0',
        '2560.0',
        '+Inf',
      ]);
      assert.equal(valueOf(families, 'vllm:time_to_first_token_seconds_count', l), 2);
      assert.equal(valueOf(families, 'vllm:e2e_request_latency_seconds_count', l), 2);
      assert.equal(valueOf(families, 'vllm:generation_tokens_total', l), 10);
      assert.equal(valueOf(families, 'vllm:inter_token_latency_seconds_count', l), 10 - 2);
      assert.equal(valueOf(families, 'vllm:prompt_tokens_total', l), 2 * 3); // "Hello, pod!" ≈ 3 tokens
      assert.ok(valueOf(families, 'vllm:prompt_tokens_created', l) > 1.6e9);
    } finally {
      await sim.close();
    }
  });

  test('gauges show the load while it lasts', () => {
    const clock = new VirtualClock();
    const engine = new SimEngine({ maxSeqs: 2, seed: 1 }, clock);
    for (let i = 0; i < 5; i++) engine.submit({ promptTokens: 300, maxTokens: 100 });
    clock.set(1000);
    engine.advanceTo(1000);
    const families = checkExposition(
      renderMetrics(engine.snapshot(), { flavor: 'vllm', modelName: 'm', startedAt: 1.7e9 }),
    );
    const l = { engine: '0', model_name: 'm' };
    assert.equal(valueOf(families, 'vllm:num_requests_running', l), 2);
    assert.equal(valueOf(families, 'vllm:num_requests_waiting', l), 3);
    const kv = valueOf(families, 'vllm:kv_cache_usage_perc', l);
    assert.ok(kv > 0 && kv < 1);
  });
});

describe('TGI /metrics', () => {
  test('uses TGI names: counters without _total, no _created, blank line after each family', async () => {
    const sim = await startSim({ engine: 'tgi', seed: 1, maxSeqs: 1, maxQueue: 0 });
    try {
      const ask = () =>
        fetch(sim.url + '/v1/completions', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'llama-3-8b', prompt: 'Hello, pod!', max_tokens: 10 }),
        });
      const first = ask();
      while (sim.engine.snapshot().running === 0) await new Promise((r) => setTimeout(r, 2));
      assert.equal((await ask()).status, 429, 'one slot, no queue: the second is turned away');
      await (await first).json();
      const text = await (await fetch(sim.url + '/metrics')).text();
      const families = checkExposition(text);
      for (const [name, type] of Object.entries({
        tgi_queue_size: 'gauge',
        tgi_batch_current_size: 'gauge',
        tgi_batch_current_max_tokens: 'gauge',
        tgi_request_queue_duration: 'histogram',
        tgi_request_duration: 'histogram',
        tgi_request_inference_duration: 'histogram',
        tgi_request_success: 'counter',
        tgi_request_count: 'counter',
        tgi_request_failure: 'counter',
      })) {
        assert.equal(families.get(name)?.type, type, name);
      }
      assert.ok(![...families.keys()].some((n) => n.endsWith('_total') || n.endsWith('_created')));
      assert.equal(valueOf(families, 'tgi_request_count'), 2);
      assert.equal(valueOf(families, 'tgi_request_success'), 1);
      assert.equal(valueOf(families, 'tgi_request_failure', { err: 'overloaded' }), 1);
      assert.match(text, /^tgi_request_count 2$/m, 'integers print without ".0"');
      // Every HELP line but the first follows a blank line: families are blank-line separated.
      const lines = text.split('\n');
      lines.forEach((line, i) => {
        if (line.startsWith('# HELP') && i > 0) assert.equal(lines[i - 1], '', `blank line before ${line}`);
      });
      const le = families.get('tgi_request_duration')!.samples.filter((s) => s.name.endsWith('_bucket'));
      assert.equal(le.length, 35 + 1);
      assert.equal(le[0].labels.le, '0.00015000000000000001');
    } finally {
      await sim.close();
    }
  });
});

describe('SGLang /metrics', () => {
  test('uses SGLang names and rank labels, and no _created', async () => {
    const sim = await startSim({ engine: 'sglang', seed: 1, latency: FAST });
    try {
      const { text } = await scrapeAfterTraffic(sim);
      const families = checkExposition(text);
      for (const [name, type] of Object.entries({
        'sglang:num_queue_reqs': 'gauge',
        'sglang:num_running_reqs': 'gauge',
        'sglang:token_usage': 'gauge',
        'sglang:cache_hit_rate': 'gauge',
        'sglang:gen_throughput': 'gauge',
        'sglang:time_to_first_token_seconds': 'histogram',
        'sglang:e2e_request_latency_seconds': 'histogram',
        'sglang:prompt_tokens_total': 'counter',
      })) {
        assert.equal(families.get(name)?.type, type, name);
      }
      assert.ok(![...families.keys()].some((n) => n.endsWith('_created')));
      const running = families.get('sglang:num_running_reqs')!.samples[0];
      assert.deepEqual(Object.keys(running.labels), ['engine_type', 'model_name', 'pp_rank', 'tp_rank']);
      assert.deepEqual(running.labels, {
        engine_type: 'unified',
        model_name: 'llama-3-8b',
        pp_rank: '0',
        tp_rank: '0',
      });
      const ttft = families.get('sglang:time_to_first_token_seconds')!;
      assert.equal(ttft.samples.find((s) => s.name.endsWith('_count'))!.value, 2);
      assert.equal(ttft.samples[0].labels.le, '0.1', 'SGLang’s own TTFT buckets');
      assert.ok(valueOf(families, 'sglang:gen_throughput') > 0);
    } finally {
      await sim.close();
    }
  });

  test('every flavor renders every histogram with its own buckets from one engine layout', () => {
    for (const flavor of ['vllm', 'tgi', 'sglang'] as const) {
      const engine = new SimEngine({ seed: 1, buckets: BUCKETS[flavor] }, new VirtualClock());
      engine.submit({ promptTokens: 100, maxTokens: 3 });
      engine.runUntilIdle();
      checkExposition(renderMetrics(engine.snapshot(), { flavor, modelName: 'm', startedAt: 1.7e9 }));
    }
  });
});
