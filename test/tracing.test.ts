// OpenTelemetry spans of the request path, read from an in-memory exporter: the request span is a
// child of the caller's traceparent; the decision carries its candidates' predictions; each pod
// attempt, the wait and the overflow are spans, and pods and providers get the attempt's (or the
// overflow's) context. With `tracing` configured, spans leave as OTLP/HTTP to a collector stand-in.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { tracerWith, type TraceExport } from '../agent/telemetry/trace-export.ts';
import { startOpenAIStandin, type OpenAIStandin } from './fixtures/openai-provider.ts';
import { chatBody, MODEL, postJson, startStack, waitFor, type Stack } from './helpers/stack.ts';

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN = '00f067aa0ba902b7';
const TRACEPARENT = `00-${TRACE_ID}-${CALLER_SPAN}-01`;

/** The parent span id of a traceparent header. */
const parentOf = (traceparent: string | string[] | undefined) => String(traceparent).split('-')[2];
const byName = (spans: ReadableSpan[], name: string) => spans.filter((s) => s.name === name);
const parentId = (s: ReadableSpan) => s.parentSpanContext?.spanId;

describe('OpenTelemetry spans through an in-memory exporter', () => {
  const memory = new InMemorySpanExporter();
  let traces: TraceExport;
  let stack: Stack;
  let provider: OpenAIStandin;
  const podHeaders: IncomingHttpHeaders[] = [];
  const recordChat = (seen: { path: string; headers: IncomingHttpHeaders }) => {
    if (seen.path === '/v1/chat/completions') podHeaders.push(seen.headers);
  };

  before(async () => {
    traces = await tracerWith([new SimpleSpanProcessor(memory)], { serviceName: 'kinference', node: 'node-a' });
    provider = await startOpenAIStandin();
    stack = await startStack({
      tracer: traces.tracer,
      pods: [{ onRequest: recordChat }, { onRequest: recordChat }],
      config: {
        providers: [{ name: 'hosted', kind: 'openai', endpoint: provider.url, models: { [MODEL]: 'hosted-llama' } }],
        policies: [
          { metadata: { name: 'default', namespace: '*' }, spec: { slo: { ttft: '5s' }, exclude: [] } },
          // No pod meets a 1 ms SLO: "leave" overflows, "stay" waits, then gets 429.
          {
            metadata: { name: 'leave', namespace: 'leave' },
            spec: { slo: { ttft: '1ms' }, exclude: [], overflow: { providers: ['hosted'] }, wait: { max: '50ms' } },
          },
          {
            metadata: { name: 'stay', namespace: 'stay' },
            spec: { slo: { ttft: '1ms' }, exclude: [], wait: { max: '100ms' } },
          },
        ],
      },
    });
    // Both pods scraped, so the decision has two candidates with predictions.
    await waitFor(
      async () => {
        const state = (await (await fetch(`${stack.admin}/debug/state`)).json()) as { pods: { local: unknown[] } };
        return state.pods.local.length === 2;
      },
      5000,
      'two pods known',
    );
  });
  after(async () => {
    await stack?.close();
    await provider?.close();
    await traces?.shutdown();
  });

  it("makes the request a child of the caller's traceparent, with the decision, the attempt and the pod under it", async () => {
    memory.reset();
    podHeaders.length = 0;
    const res = await postJson(`${stack.api}/v1/chat/completions`, chatBody('hi', { stream: true }), {
      traceparent: TRACEPARENT,
    });
    assert.equal(res.status, 200);
    await res.text();
    const spans = memory.getFinishedSpans();
    const [request] = byName(spans, 'kinference chat');
    assert.ok(request, `a request span among ${spans.map((s) => s.name)}`);
    assert.equal(request.spanContext().traceId, TRACE_ID);
    assert.equal(parentId(request), CALLER_SPAN);
    assert.equal(request.attributes['gen_ai.request.model'], MODEL);
    assert.equal(request.attributes['http.response.status_code'], 200);
    assert.match(String(request.attributes['kinference.route']), /^local\/pod-[01]$/);

    const [decide] = byName(spans, 'kinference.decide');
    assert.equal(parentId(decide!), request.spanContext().spanId);
    assert.equal(decide!.attributes['kinference.decision.action'], 'pod');
    const pods = decide!.attributes['kinference.candidates.pods'] as string[];
    const predictions = decide!.attributes['kinference.candidates.predicted_ttft_ms'] as number[];
    assert.deepEqual([...pods].sort(), ['local/pod-0', 'local/pod-1']);
    assert.equal(predictions.length, 2);
    assert.ok(
      predictions.every((ms) => Number.isFinite(ms) && ms > 0),
      `predictions ${predictions}`,
    );
    assert.equal(decide!.attributes['kinference.decision.pod'], request.attributes['kinference.route']);

    const [attempt] = byName(spans, 'kinference.attempt');
    assert.equal(parentId(attempt!), request.spanContext().spanId);
    assert.equal(attempt!.attributes['kinference.pod'], request.attributes['kinference.route']);
    assert.ok(typeof attempt!.attributes['kinference.ttft_ms'] === 'number');
    // The pod's own spans would nest under the attempt: it got the attempt's context.
    assert.equal(podHeaders.length, 1);
    assert.equal(parentOf(podHeaders[0]!.traceparent), attempt!.spanContext().spanId);
    assert.ok(String(podHeaders[0]!.traceparent).includes(TRACE_ID));
  });

  it('records the overflow as a span whose context the provider receives', async () => {
    memory.reset();
    const res = await postJson(`${stack.api}/v1/chat/completions`, chatBody('hi'), {
      traceparent: TRACEPARENT,
      'x-kinference-tenant': 'leave',
    });
    assert.equal(res.status, 200);
    await res.text();
    const spans = memory.getFinishedSpans();
    const [overflow] = byName(spans, 'kinference.overflow');
    assert.ok(overflow, `an overflow span among ${spans.map((s) => s.name)}`);
    assert.deepEqual(overflow.attributes['kinference.overflow.providers'], ['hosted']);
    assert.equal(overflow.attributes['kinference.provider'], 'hosted');
    const [decide] = byName(spans, 'kinference.decide');
    assert.equal(decide!.attributes['kinference.decision.action'], 'overflow');
    assert.deepEqual(decide!.attributes['kinference.dropped.reasons'], ['over-slo', 'over-slo']);
    const sent = provider.requests.at(-1)!;
    assert.equal(parentOf(sent.headers.traceparent), overflow.spanContext().spanId);
  });

  it('records the wait and how it ended, and marks the refused request as an error-free 429', async () => {
    memory.reset();
    const res = await postJson(`${stack.api}/v1/chat/completions`, chatBody('hi'), { 'x-kinference-tenant': 'stay' });
    assert.equal(res.status, 429);
    await res.text();
    const spans = memory.getFinishedSpans();
    const waits = byName(spans, 'kinference.wait');
    assert.ok(waits.length >= 1, `a wait span among ${spans.map((s) => s.name)}`);
    assert.equal(waits.at(-1)!.attributes['kinference.wait.outcome'], 'timeout');
    const [request] = byName(spans, 'kinference chat');
    assert.equal(request!.attributes['http.response.status_code'], 429);
    assert.equal(parentId(request!), undefined, 'no traceparent: a new trace');
    const actions = byName(spans, 'kinference.decide').map((s) => s.attributes['kinference.decision.action']);
    assert.equal(actions[0], 'wait');
    assert.equal(actions.at(-1), 'reject');
  });
});

describe('OpenTelemetry export', () => {
  it('sends nothing and leaves the caller’s traceparent as it came when tracing is not configured', async () => {
    const seen: IncomingHttpHeaders[] = [];
    const stack = await startStack({
      pods: [{ onRequest: (s) => s.path === '/v1/chat/completions' && seen.push(s.headers) }],
    });
    try {
      const res = await postJson(`${stack.api}/v1/chat/completions`, chatBody(), { traceparent: TRACEPARENT });
      await res.text();
      assert.equal(seen.at(-1)?.traceparent, TRACEPARENT);
    } finally {
      await stack.close();
    }
  });

  it('exports OTLP/HTTP to the configured collector, flushed at shutdown', async () => {
    const received: { path: string; contentType: string | undefined; body: string }[] = [];
    const collector = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString('utf8')));
      req.on('end', () => {
        received.push({ path: req.url ?? '', contentType: req.headers['content-type'], body });
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
    const { port } = collector.address() as AddressInfo;
    const stack = await startStack({
      config: { tracing: { endpoint: `http://127.0.0.1:${port}/v1/traces`, serviceName: 'kinference-test' } },
    });
    try {
      const res = await postJson(`${stack.api}/v1/chat/completions`, chatBody(), { traceparent: TRACEPARENT });
      await res.text();
    } finally {
      await stack.close();
    }
    collector.close();
    assert.ok(received.length >= 1, 'the collector got a request');
    assert.equal(received[0]!.path, '/v1/traces');
    assert.match(received[0]!.contentType ?? '', /application\/json/);
    const payload = JSON.parse(received.map((r) => r.body).join('')) as {
      resourceSpans: {
        resource: { attributes: { key: string; value: { stringValue?: string } }[] };
        scopeSpans: { spans: { name: string; traceId: string; parentSpanId?: string }[] }[];
      }[];
    };
    const [resourceSpans] = payload.resourceSpans;
    const service = resourceSpans!.resource.attributes.find((a) => a.key === 'service.name');
    assert.equal(service?.value.stringValue, 'kinference-test');
    const spans = resourceSpans!.scopeSpans.flatMap((s) => s.spans);
    const request = spans.find((s) => s.name === 'kinference chat');
    assert.ok(request, `spans: ${spans.map((s) => s.name)}`);
    assert.equal(request.traceId, TRACE_ID);
    assert.equal(request.parentSpanId, CALLER_SPAN);
    assert.ok(spans.some((s) => s.name === 'kinference.attempt'));
  });
});
