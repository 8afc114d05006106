// The floor for `bench:proxy`: the least a Node proxy does for the same request — node:http reads
// the body whole, undici's dispatch callbacks send it to the one upstream on a keep-alive pool,
// and the answer is written back as it arrives. No routing, parsing, metrics or limits: what
// Node itself costs per request, so the report separates Node's share from the agent's own.
// Usage: node bench/proxy/bare-node.ts --upstream HOST:PORT (prints "listening PORT").
import { createServer, type ServerResponse } from 'node:http';
import { parseArgs } from 'node:util';
import { Agent, type Dispatcher } from 'undici';

const { values } = parseArgs({ options: { upstream: { type: 'string' } } });
const origin = `http://${values.upstream}`;
// The agent's pod dispatcher settings, so both keep the same connections to the upstream.
const dispatcher = new Agent({ keepAliveTimeout: 30_000, keepAliveMaxTimeout: 300_000, pipelining: 1 });

/** Relays the upstream's answer to `res` as it arrives, pausing the upstream while the client's socket is full. */
class Relay implements Dispatcher.DispatchHandler {
  readonly #res: ServerResponse;
  #controller: Dispatcher.DispatchController | undefined;

  constructor(res: ServerResponse) {
    this.#res = res;
    res.on('drain', () => this.#controller?.resume());
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
  }

  onResponseStart(_c: Dispatcher.DispatchController, status: number, headers: Record<string, unknown>): void {
    const type = headers['content-type'];
    this.#res.writeHead(status, type === undefined ? {} : { 'content-type': String(type) });
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (!this.#res.write(chunk)) controller.pause();
  }

  onResponseEnd(): void {
    this.#res.end();
  }

  onResponseError(_c: Dispatcher.DispatchController, error: Error): void {
    if (this.#res.headersSent) this.#res.destroy(error);
    else this.#res.writeHead(502).end();
  }
}

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    dispatcher.dispatch(
      {
        origin,
        path: req.url ?? '/',
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: Buffer.concat(chunks),
      },
      new Relay(res),
    );
  });
});
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`listening ${typeof address === 'object' && address ? address.port : ''}\n`);
});
