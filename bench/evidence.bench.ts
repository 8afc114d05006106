// What per-request evidence costs on the request path: what every request pays (request id,
// trace context, bounded metric labels) and what a sampled one adds (usage read, the JSON line),
// side by side with parsing the request body, which every request already pays.
//   node bench/evidence.bench.ts
import { randomUUID } from 'node:crypto';
import { Bench } from 'tinybench';
import { propagatedHeaders, requestIdFor } from '../agent/forward/headers.ts';
import { logLine, type RequestRecord } from '../agent/server/observability/evidence.ts';
import { usageOf } from '../shared/openai/usage.ts';
import { BoundedLabel } from '../agent/server/observability/metrics.ts';
import { parseInferenceRequest } from '../agent/server/bodies/request.ts';

const headers = new Headers({
  traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
  tracestate: 'vendor=abc',
  'x-request-id': 'app-req-42',
});
const body = new TextEncoder().encode(
  JSON.stringify({ model: 'llama-3-8b', stream: true, messages: [{ role: 'user', content: 'word '.repeat(200) }] }),
);
const answer = new TextEncoder().encode(
  JSON.stringify({
    id: 'x',
    choices: [{ message: { content: 'word '.repeat(100) } }],
    usage: { prompt_tokens: 250, completion_tokens: 100 },
  }),
);
const models = new BoundedLabel(100);
const policies = new BoundedLabel(100);
const record: RequestRecord = {
  time: new Date().toISOString(),
  requestId: 'app-req-42',
  api: 'chat',
  model: 'llama-3-8b',
  tenant: 'team-a',
  namespace: 'team-a',
  policy: 'team-a/chat',
  tags: ['pii'],
  route: 'local/gpu-1',
  status: 200,
  outcome: 'ok',
  stream: true,
  promptTokensEstimate: 254,
  predictedTtftMs: 212.4,
  ttftMs: 230.1,
  podAttempts: 1,
  waitedMs: 0,
  durationMs: 1830,
};

let sink = 0;
const bench = new Bench({ time: 1500, warmupTime: 300 });
bench
  .add('every request: id, trace headers, model/policy labels', () => {
    const id = requestIdFor(headers.get('x-request-id'), randomUUID);
    sink +=
      Object.keys(propagatedHeaders(headers, id)).length +
      models.value('llama-3-8b').length +
      policies.value('team-a/chat').length;
  })
  .add('every request, no client id: + a fresh UUID', () => {
    sink += requestIdFor(null, randomUUID).length;
  })
  .add('sampled request: usage of a non-streamed answer + the JSON line', () => {
    sink += (usageOf(answer).completionTokens ?? 0) + logLine(record).length;
  })
  .add('for scale: parsing a 1 KB chat body (already paid)', () => {
    sink += parseInferenceRequest('chat', body).model.length;
  });
await bench.run();

console.log(`node ${process.version}`);
const base = bench.tasks.at(-1)!.result;
for (const task of bench.tasks) {
  const r = task.result;
  if (r.state !== 'completed' || base.state !== 'completed') continue;
  console.log(
    `${task.name}: ${(r.latency.mean * 1000).toFixed(2)} µs/op (±${r.latency.rme.toFixed(1)}%), ${(r.latency.mean / base.latency.mean).toFixed(2)}× the body parse`,
  );
}
if (sink === -1) console.log(sink);
