// The floor for an own API server, for `bench:proxy`: bare-http with node:http's server replaced by
// a minimal HTTP/1.1 server on node:net, in front of the same pod client. Each socket read (node's
// own Buffer) is scanned in place; the request head is found and read once as text (request line,
// Content-Length); the body is copied out once; a whole answer goes back as one write with its
// length, an event stream chunked (what one loop turn produced, as one write). No limits beyond
// the head's size, no timers, no checks beyond what framing needs: against bare-http it says how
// much of node:http's server an own server could save at most; against bare-net, what HTTP costs.
// Usage: node bench/proxy/bare-own.ts --upstream HOST:PORT (prints "listening PORT").
import { createServer, type Socket } from 'node:net';
import { parseArgs } from 'node:util';
import { PodClient } from '../../agent/forward/pod-client.ts';
import { HEAD_END } from '../../shared/http1.ts';

const { values } = parseArgs({ options: { upstream: { type: 'string' } } });
const upstream = values.upstream!;
const client = new PodClient({ maxConnectionsPerPod: 128 });
const MAX_HEAD = 16 * 1024;
const CONTENT_LENGTH = /\r\ncontent-length:[ \t]*(\d+)/i;
const CRLF = Buffer.from('\r\n');
const END = Buffer.from('0\r\n\r\n');
const STATUS_TEXT: Record<number, string> = { 200: 'OK', 502: 'Bad Gateway' };

class Connection {
  readonly socket: Socket;
  head: Buffer | undefined; // a head cut by a read boundary
  body: Buffer | undefined;
  bodyAt = 0;
  path = '/';
  busy = false;

  constructor(socket: Socket) {
    this.socket = socket;
  }

  onRead(chunk: Buffer): void {
    if (this.busy) return void this.socket.destroy(); // no pipelining in the floor
    let i = 0;
    const n = chunk.length;
    if (this.body === undefined) {
      let buf = chunk;
      if (this.head) buf = Buffer.concat([this.head, buf]);
      const at = buf.indexOf(HEAD_END);
      if (at < 0) {
        if (buf.length > MAX_HEAD) return void this.socket.destroy();
        this.head = Buffer.from(buf);
        return;
      }
      const text = buf.toString('latin1', 0, at);
      const firstSpace = text.indexOf(' ');
      this.path = text.slice(firstSpace + 1, text.indexOf(' ', firstSpace + 1));
      const m = CONTENT_LENGTH.exec(text);
      this.body = Buffer.allocUnsafe(m ? Number(m[1]) : 0);
      this.bodyAt = 0;
      i = at + 4 - (this.head ? this.head.length : 0);
      this.head = undefined;
    }
    const body = this.body;
    const take = Math.min(n - i, body.length - this.bodyAt);
    chunk.copy(body, this.bodyAt, i, i + take);
    this.bodyAt += take;
    if (this.bodyAt === body.length) {
      this.body = undefined;
      this.forward(body);
    }
  }

  forward(body: Buffer): void {
    const socket = this.socket;
    this.busy = true;
    // A whole answer (not an event stream) is held and sent as one write with its length, as the
    // agent does; an event stream goes out chunked, whatever one loop turn produced as one write.
    let streamed = false;
    let head = '';
    const parts: Buffer[] = [];
    let pending = false;
    const flush = () => {
      pending = false;
      if (parts.length === 0) return;
      const bytes = Buffer.concat(parts);
      parts.length = 0;
      socket.write(bytes);
    };
    const later = () => {
      if (pending) return;
      pending = true;
      queueMicrotask(flush);
    };
    client.post(
      upstream,
      this.path,
      { 'content-type': 'application/json' },
      body,
      {
        head: (status, type) => {
          streamed = type === 'text/event-stream';
          head = `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? ''}\r\n${type === undefined ? '' : `content-type: ${type}\r\n`}`;
          if (!streamed) return;
          parts.push(Buffer.from(`${head}transfer-encoding: chunked\r\n\r\n`, 'latin1'));
          later();
        },
        data: (chunk) => {
          if (!streamed) return (parts.push(chunk), true);
          parts.push(Buffer.from(`${chunk.length.toString(16)}\r\n`, 'latin1'), chunk, CRLF);
          later();
          return true;
        },
        end: () => {
          this.busy = false;
          if (streamed) {
            parts.push(END);
            return later();
          }
          let length = 0;
          for (const part of parts) length += part.length;
          parts.unshift(Buffer.from(`${head}content-length: ${length}\r\n\r\n`, 'latin1'));
          flush();
        },
        error: () => void socket.destroy(),
      },
      30_000,
    );
  }
}

const own = createServer({ noDelay: true }, (socket) => {
  const conn = new Connection(socket);
  socket.on('data', (chunk: Buffer) => conn.onRead(chunk));
  socket.on('error', () => {});
});
own.listen(0, '127.0.0.1', () => {
  const address = own.address();
  process.stdout.write(`listening ${typeof address === 'object' && address ? address.port : ''}\n`);
});
