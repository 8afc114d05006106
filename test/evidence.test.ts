// The pure parts of the request's evidence and surface: ids, trace context, pod credentials,
// routing by load, why a request overflowed, bounded metric labels, usage from an answer.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { credentialFor, propagatedHeaders, requestIdFor } from '../agent/forward/headers.ts';
import { leastLoaded } from '../agent/route/least-loaded.ts';
import type { Candidate } from '../agent/route/candidate.ts';
import { logLine, overflowReason } from '../agent/server/observability/evidence.ts';
import { usageOf } from '../shared/openai/usage.ts';
import { BoundedLabel, createMetrics } from '../agent/server/observability/metrics.ts';
import { routeCandidate } from './helpers/route-fixtures.ts';
import { chatBody, postJson, startStack } from './helpers/stack.ts';

const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

describe('request ids and trace context', () => {
  it('keeps a plain client id and replaces a long or odd one', () => {
    assert.equal(
      requestIdFor('abc-123', () => 'new'),
      'abc-123',
    );
    assert.equal(
      requestIdFor('x'.repeat(129), () => 'new'),
      'new',
    );
    assert.equal(
      requestIdFor('has space', () => 'new'),
      'new',
    );
    assert.equal(
      requestIdFor(null, () => 'new'),
      'new',
    );
  });

  it('passes a valid traceparent with its tracestate, and drops malformed or all-zero ones', () => {
    assert.deepEqual(propagatedHeaders(new Headers({ traceparent: TRACEPARENT, tracestate: 'a=1' }), 'id'), {
      'x-request-id': 'id',
      traceparent: TRACEPARENT,
      tracestate: 'a=1',
    });
    for (const bad of [
      '00-00000000000000000000000000000000-00f067aa0ba902b7-01',
      'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      '00-xyz-00f067aa0ba902b7-01',
    ]) {
      assert.deepEqual(
        propagatedHeaders(new Headers({ traceparent: bad, tracestate: 'a=1' }), 'id'),
        { 'x-request-id': 'id' },
        bad,
      );
    }
  });
});

describe('pod credentials', () => {
  const rules = [
    { apiKey: 'all' },
    { namespace: 'ml', apiKey: 'ns' },
    { pod: 'ml/llama-0', apiKey: 'one' },
    { pod: 'other', apiKey: 'other-pod' },
  ];
  it('picks the rule naming the pod, then its namespace, then the catch-all', () => {
    assert.equal(credentialFor({ name: 'llama-0', namespace: 'ml' }, rules), 'one');
    assert.equal(credentialFor({ name: 'llama-1', namespace: 'ml' }, rules), 'ns');
    assert.equal(credentialFor({ name: 'x', namespace: 'web' }, rules), 'all');
    assert.equal(credentialFor({ name: 'other', namespace: 'web' }, rules), 'other-pod');
    assert.equal(credentialFor({ name: 'x', namespace: 'web' }, []), undefined);
  });
});

const candidate = (name: string, load: Partial<Candidate> = {}): Candidate =>
  routeCandidate(name, { maxAgeMs: 100, ...load });

describe('routing passthrough requests by load', () => {
  it('takes the fresh, healthy pod serving the model with the least work, a local one on ties', () => {
    const pods = [
      candidate('busy', { running: 5 }),
      candidate('free', { running: 1 }),
      candidate('stale', { ageMs: 500 }),
      candidate('sick', { healthy: false }),
    ];
    assert.equal(leastLoaded(pods, 'm', () => 0)?.pod.name, 'free');
    assert.equal(
      leastLoaded([candidate('peer', { where: 'peer' }), candidate('local')], 'm', () => 0)?.pod.name,
      'local',
    );
    assert.equal(
      leastLoaded([candidate('sent', { unseenSent: 2 }), candidate('idle', { running: 1 })], 'm', () => 0)?.pod.name,
      'idle',
    );
    assert.equal(
      leastLoaded(pods, 'other-model', () => 0),
      undefined,
    );
  });
});

describe('why a request overflowed', () => {
  it('names failed pods first, then the most common drop reason, else that no pod serves the model', () => {
    assert.equal(overflowReason([{ reason: 'over-slo' }], 1), 'pods-failed');
    assert.equal(
      overflowReason(
        [{ reason: 'excluded' }, { reason: 'over-slo' }, { reason: 'over-slo' }, { reason: 'model-not-served' }],
        0,
      ),
      'over-slo',
    );
    assert.equal(overflowReason([{ reason: 'model-not-served' }], 0), 'no-pod');
  });
});

describe('bounded labels and usage', () => {
  it('lets the first values through and counts the rest as "other"', () => {
    const label = new BoundedLabel(2);
    assert.deepEqual(
      ['a', 'b', 'c', 'a', 'd'].map((v) => label.value(v)),
      ['a', 'b', 'other', 'a', 'other'],
    );
  });
  it('reads chat and Responses usage, and nothing from garbage', () => {
    const bytes = (o: unknown) => new TextEncoder().encode(typeof o === 'string' ? o : JSON.stringify(o));
    assert.deepEqual(usageOf(bytes({ usage: { prompt_tokens: 3, completion_tokens: 4 } })), {
      promptTokens: 3,
      completionTokens: 4,
    });
    assert.deepEqual(usageOf(bytes({ usage: { input_tokens: 5, output_tokens: 6 } })), {
      promptTokens: 5,
      completionTokens: 6,
    });
    assert.deepEqual(usageOf(bytes('{not json')), {});
  });
  it('writes one line of JSON', () => {
    const line = logLine({
      time: 't',
      requestId: 'r',
      api: 'chat',
      tags: ['pii'],
      route: 'local/p',
      status: 200,
      outcome: 'ok',
      stream: false,
      podAttempts: 1,
      waitedMs: 0,
    });
    assert.ok(!line.includes('\n'));
    assert.equal(JSON.parse(line).msg, 'request');
  });
});

describe('request metrics', () => {
  it('labels requests by model and policy within the bound, and records non-streamed first bytes apart', async () => {
    const stack = await startStack({
      config: { limits: { maxLabelValues: 1 }, policies: [{ metadata: { name: 'p', namespace: '*' }, spec: {} }] },
    });
    try {
      for (const stream of [false, true]) {
        const res = await postJson(`${stack.api}/v1/chat/completions`, chatBody('hi', { stream }));
        await res.arrayBuffer();
      }
      const bad = await postJson(`${stack.api}/v1/chat/completions`, {
        model: 'nope',
        messages: [{ role: 'user', content: 'x' }],
      });
      await bad.arrayBuffer();
      const text = await (await fetch(`${stack.admin}/metrics`)).text();
      assert.match(
        text,
        /kinference_requests_total\{api="chat",route="local",outcome="ok",model="llama-3-8b",policy="\*\/p"\} 2/,
      );
      assert.match(
        text,
        /kinference_requests_total\{api="chat",route="rejected",outcome="404",model="none",policy="none"\} 1/,
      );
      assert.match(text, /kinference_upstream_ttft_seconds_count\{route="local",stream="false"\} 1/);
      assert.match(text, /kinference_upstream_ttft_seconds_count\{route="local",stream="true"\} 1/);
      assert.match(text, /kinference_prediction_error_ratio_count\{stream="false"\} 1/);
      assert.match(text, /kinference_pod_ttft_seconds_count\{pod="pod-0",source="measured"\} 1/);
      assert.match(text, /kinference_pod_ttft_seconds_count\{pod="pod-0",source="predicted"\} 1/);
    } finally {
      await stack.close();
    }
  });

  it('exports every new series from a fresh registry', async () => {
    const m = createMetrics();
    m.overflows.inc({ provider: 'p', reason: 'over-slo' });
    assert.match(await m.registry.metrics(), /kinference_overflow_total\{provider="p",reason="over-slo"\} 1/);
  });
});
