// A trivially fast OpenAI-compatible model server for `bench:proxy`: answers at once, so what a
// proxy in front of it adds is all that differs between the targets. It also serves a vLLM
// /metrics page (idle pod), /health and /v1/models, so the agent scrapes and routes to it as to
// a real pod. Runs in its own process: the load generator and the proxies keep their own cores.
import { createServer } from 'node:http';

const MODEL = process.env.BENCH_MODEL ?? 'bench-model';
const COMPLETION = JSON.stringify({
  id: 'cmpl-bench',
  object: 'chat.completion',
  created: 0,
  model: MODEL,
  choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 8, completion_tokens: 1, total_tokens: 9 },
});
const chunk = (content: string, finish: string | null) =>
  `data: ${JSON.stringify({ id: 'cmpl-bench', object: 'chat.completion.chunk', created: 0, model: MODEL, choices: [{ index: 0, delta: { content }, finish_reason: finish }] })}\n\n`;
const STREAM = [chunk('o', null), chunk('k', null), chunk('', 'stop'), 'data: [DONE]\n\n'];
const METRICS = [
  '# TYPE vllm:num_requests_running gauge',
  `vllm:num_requests_running{engine="0",model_name="${MODEL}"} 0.0`,
  '# TYPE vllm:num_requests_waiting gauge',
  `vllm:num_requests_waiting{engine="0",model_name="${MODEL}"} 0.0`,
  '# TYPE vllm:kv_cache_usage_perc gauge',
  `vllm:kv_cache_usage_perc{engine="0",model_name="${MODEL}"} 0.0`,
  '',
].join('\n');
const MODELS = JSON.stringify({ object: 'list', data: [{ id: MODEL, object: 'model', created: 0, owned_by: 'vllm' }] });

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    if (req.method === 'GET') {
      if (req.url === '/metrics')
        return void res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' }).end(METRICS);
      if (req.url === '/v1/models') return void res.writeHead(200, { 'content-type': 'application/json' }).end(MODELS);
      return void res.writeHead(200).end();
    }
    const streamed = Buffer.concat(chunks).includes('"stream":true');
    if (!streamed) return void res.writeHead(200, { 'content-type': 'application/json' }).end(COMPLETION);
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    for (const frame of STREAM) res.write(frame);
    res.end();
  });
});
server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`listening ${typeof address === 'object' && address ? address.port : ''}\n`);
});
