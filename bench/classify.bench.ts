// What classification costs per request: a 4 KB prose prompt (with the dates, prices, versions
// and ids real prompts carry) without PII, the same with PII at the very end (the whole text is
// scanned either way), a digit-dense 4 KB log excerpt, the detectors' worst ordinary case, and a
// 64 KB agentic chat (many turns, tool calls with JSON arguments, metadata, a JSON schema): every
// string of the body is read, whatever its field.
//   node bench/classify.bench.ts
import { Bench } from 'tinybench';
import { classify } from '../agent/classify/classify.ts';

const PARAGRAPHS = [
  'Please summarise the following support conversation and suggest a next step for the agent. ',
  'The customer upgraded to version 2.14.3 on 2024-05-01 and reports that the export job started at 12:30:45 UTC now takes 45 minutes instead of 5. ',
  'Their plan costs $1,299.00 per year and they have 37 seats; order ORD-2024-000123 was paid on March 3rd. ',
  'They run the agent on Windows 10 (build v10.0.19045) behind a proxy at 10.0.0.1, and the job id is 9f86d081884c7d65. ',
  'Earlier tickets mention a similar regression in release 2.13, which was fixed by raising the batch size from 500 to 2000 rows. ',
  'Write the answer in a friendly tone, in at most three short paragraphs, and do not promise a delivery date. ',
];

function prose(bytes: number): string {
  let text = '';
  for (let i = 0; text.length < bytes; i++) text += PARAGRAPHS[i % PARAGRAPHS.length];
  return text.slice(0, bytes);
}

const clean = prose(4096);
const withPii = `${prose(4096 - 120)} Reach me at jane.doe@example.com or +1 415 555 2671; card 4111 1111 1111 1111, IBAN DE89 3704 0044 0532 0130 00.`;
let log = '';
for (let i = 0; log.length < 4096; i++) {
  log += `2024-05-01T12:${String(i % 60).padStart(2, '0')}:45Z req=${100000 + i * 7919} took ${(i * 37) % 900}ms tokens=${i * 13} 10.0.${i % 255}.${i % 7}\n`;
}
log = log.slice(0, 4096);

// Through JSON, as the ingress hands bodies over: flat strings, not the rope `+=` builds.
const chat = (text: string): unknown =>
  JSON.parse(JSON.stringify({ model: 'llama-3-8b', messages: [{ role: 'user', content: text }] }));
function agentic(bytes: number): unknown {
  const messages: unknown[] = [{ role: 'system', content: prose(2048) }];
  for (let turn = 0; JSON.stringify(messages).length < bytes - 1024; turn++) {
    messages.push({
      role: 'user',
      content: [
        { type: 'text', text: prose(900) },
        { type: 'text', text: prose(400) },
      ],
    });
    messages.push({
      role: 'assistant',
      content: null,
      tool_calls: [
        {
          id: `call_${turn}`,
          type: 'function',
          function: {
            name: 'search_orders',
            arguments: JSON.stringify({ query: prose(300), since: '2024-05-01', limit: 50 }),
          },
        },
      ],
    });
    messages.push({ role: 'tool', tool_call_id: `call_${turn}`, content: log.slice(0, 600) });
  }
  return JSON.parse(
    JSON.stringify({
      model: 'llama-3-8b',
      messages,
      metadata: { session: '9f86d081884c7d65', app: 'support-console' },
      response_format: {
        type: 'json_schema',
        json_schema: {
          name: 'answer',
          schema: { type: 'object', properties: { summary: { type: 'string', description: prose(200) } } },
        },
      },
    }),
  );
}
const bodies = { clean: chat(clean), withPii: chat(withPii), log: chat(log), agentic64: agentic(64 * 1024) };
for (const body of [bodies.clean, bodies.log, bodies.agentic64])
  if (classify(undefined, body).length !== 0)
    throw new Error(`bench texts must be clean: ${classify(undefined, body).join(',')}`);
if (!classify(undefined, bodies.withPii).includes('pii')) throw new Error('bench PII must be found');

let sink = 0;
const bench = new Bench({ time: 1500, warmupTime: 300 });
bench
  .add('4 KB prose, no PII', () => {
    sink += classify(undefined, bodies.clean).length;
  })
  .add('4 KB prose, PII at the end', () => {
    sink += classify('internal', bodies.withPii).length;
  })
  .add('4 KB digit-dense log, no PII', () => {
    sink += classify(undefined, bodies.log).length;
  })
  .add('64 KB agentic chat, no PII', () => {
    sink += classify(undefined, bodies.agentic64).length;
  });

await bench.run();

console.log(`node ${process.version}`);
for (const task of bench.tasks) {
  const result = task.result;
  if (result.state !== 'completed') {
    console.log(`${task.name}: ${result.state}`);
    continue;
  }
  const us = (ms: number) => (ms * 1000).toFixed(2);
  console.log(
    `${task.name}: ${us(result.latency.mean)} µs/op mean, ${us(result.latency.p50)} median, p99 ${us(result.latency.p99)} (±${result.latency.rme.toFixed(1)}%)`,
  );
}
if (sink === -1) console.log(sink);
