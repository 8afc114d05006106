// Between bare-net and the agent for `bench:proxy`: node:http's server in front of the agent's own
// pod client (agent/forward/pod-client.ts), no routing, parsing, metrics or limits. Against
// bare-net it shows what node:http's server costs; against the agent, what the agent's own path
// (parse, classify, decide, measure) adds on top.
// Usage: node bench/proxy/bare-http.ts --upstream HOST:PORT (prints "listening PORT").
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import { PodClient } from '../../agent/forward/pod-client.ts';

const { values } = parseArgs({ options: { upstream: { type: 'string' } } });
const upstream = values.upstream!;
const client = new PodClient({ maxConnectionsPerPod: 128 });

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const exchange = client.post(
      upstream,
      req.url ?? '/',
      { 'content-type': 'application/json' },
      Buffer.concat(chunks),
      {
        head: (status, type) => void res.writeHead(status, type === undefined ? {} : { 'content-type': type }),
        data: (chunk) => res.write(chunk),
        end: () => void res.end(),
        error: () => void (res.headersSent ? res.destroy() : res.writeHead(502).end()),
      },
      30_000,
    );
    res.on('drain', () => exchange.resume());
  });
});
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`listening ${typeof address === 'object' && address ? address.port : ''}\n`);
});
