// The agent's HTTP/1.1 client for pods: kept-alive connections per pod, one request at a time on
// each, bounded by `maxConnectionsPerPod`. undici did this before and cost 24–29 µs of CPU per
// request in the agent (request objects, header lists, the wasm llhttp parser and its callbacks,
// a Buffer per read, its own queue and timers) against a few µs here (bench:proxy, README "Proxy
// overhead"). Every socket reads into one buffer shared by all connections (`onread`: libuv reads
// and calls back synchronously, so no two reads overlap); the response head is parsed once as
// text; body bytes go to the caller copied into one owned Buffer per socket read, framing removed
// (Content-Length, chunked, or until close).
//
// The response reader follows agent/telemetry/scrape-connection.ts (the same HTTP/1.1 head rules
// and limits, shared/http1.ts; chunked bodies through the one strict reader of
// shared/http1-chunked.ts), extended with what a relay needs: the content type, the server's
// keep-alive hint, backpressure, and a body that is owned rather than lent.
//
// Robustness: a head, a chunk-size line and trailers have a size limit; anything outside HTTP/1.1's
// grammar fails the exchange and drops the connection; bytes nobody asked for drop it too (no
// pipelining); `Connection: close` or HTTP/1.0 closes it after the response. An idle connection is
// reused only within the server's keep-alive (its `Keep-Alive: timeout` less 2 s, as undici does,
// or `keepAliveMs`); a kept-alive connection that the server closed just as a request was written
// (nothing of an answer read) is retried once on a fresh connection, since such a race says nothing
// about the pod. Timeouts: the body's idle timeout is here (`idleMs` between reads, not counted
// while the caller paused); the deadline for the response head is the caller's (it covers time
// queued for a connection too), which calls `abort`.
import { connect, type Socket } from 'node:net';
import { describeError } from '../../shared/describe-error.ts';
import { ChunkedDecoder } from '../../shared/http1-chunked.ts';
import { HEAD_END, breaksLine, hasToken, isFieldName } from '../../shared/http1.ts';

/** Where one exchange's answer goes: `head`, any number of `data`, then `end`; or `error` at any point. */
export interface PodResponseHandler {
  /** The final status and content type (undefined when the pod sent none). */
  head(status: number, contentType: string | undefined): void;
  /** Body bytes, framing removed; the Buffer is the handler's to keep. False asks to pause until `resume()`. */
  data(chunk: Buffer): boolean;
  end(): void;
  /** The exchange failed (refused, reset, closed early, malformed, body idle too long); nothing follows. */
  error(error: Error): void;
}

/** One exchange in flight, as its sender sees it. */
export interface PodRequest {
  /** Stops the exchange: its connection is dropped (unless still queued) and no callback follows. */
  abort(): void;
  /** More body, please (after `data` returned false). */
  resume(): void;
}

export interface PodClientOptions {
  /** Connections open to one pod at most; further requests wait (FIFO) for one to be free. */
  maxConnectionsPerPod: number;
  /** How long an idle connection is reused when the server sent no keep-alive hint (ms). */
  keepAliveMs?: number;
  /** Upper bound on a server's keep-alive hint (ms). */
  maxKeepAliveMs?: number;
  /** Limit for a response head, a chunk-size line, and a chunked body's trailers. */
  maxHeaderBytes?: number;
}

const DEFAULTS = { keepAliveMs: 30_000, maxKeepAliveMs: 300_000, maxHeaderBytes: 16 * 1024 };
/** A server's keep-alive hint is used this much shorter, so we never send on a connection it is closing. */
const KEEP_ALIVE_MARGIN_MS = 2_000;
const READ_BUFFER_BYTES = 64 * 1024;
/** Request bodies up to this size go out in the same write as the head (one copy, one syscall). */
const JOINED_WRITE_BYTES = 64 * 1024;

/** All sockets read into this one buffer; the reader copies out what it keeps before the callback returns. */
let sharedReadBuffer: Buffer | undefined;

// Where the response being read is. Strings, not an enum: node runs this file as it is.
type ReadState =
  | 'idle' // no exchange on the connection
  | 'head'
  | 'length' // Content-Length bytes left in #remaining
  | 'until-close'
  | 'chunked' // in #chunked's hands
  | 'ended';

export interface ResponseHead {
  status: number;
  contentType: string | undefined;
  keepAlive: boolean;
  /** The server's `Keep-Alive: timeout=S`, in ms. */
  keepAliveHintMs: number | undefined;
  body: { length: number } | 'chunked' | 'until-close' | 'none';
}

/** Parses a response head's text (status line and header lines, without the blank line); a string is why it is refused. */
export function parseResponseHead(text: string): ResponseHead | string {
  let lineEnd = text.indexOf('\r\n');
  if (lineEnd < 0) lineEnd = text.length;
  // HTTP/1.x SP 3DIGIT [SP reason]
  if (
    lineEnd < 12 ||
    !text.startsWith('HTTP/1.') ||
    (text.charCodeAt(7) !== 48 && text.charCodeAt(7) !== 49) ||
    text.charCodeAt(8) !== 32 ||
    (lineEnd > 12 && text.charCodeAt(12) !== 32)
  )
    return `not an HTTP/1.x status line: ${JSON.stringify(text.slice(0, Math.min(lineEnd, 40)))}`;
  const d0 = text.charCodeAt(9) - 48;
  const d1 = text.charCodeAt(10) - 48;
  const d2 = text.charCodeAt(11) - 48;
  if (d0 < 1 || d0 > 9 || d1 < 0 || d1 > 9 || d2 < 0 || d2 > 9)
    return `not an HTTP/1.x status line: ${JSON.stringify(text.slice(0, Math.min(lineEnd, 40)))}`;
  const status = d0 * 100 + d1 * 10 + d2;
  const http11 = text.charCodeAt(7) === 49;
  let connection = '';
  let transferEncoding: string | undefined;
  let contentLength: number | undefined;
  let contentType: string | undefined;
  let keepAliveHeader: string | undefined;
  for (let start = lineEnd + 2; start < text.length;) {
    let end = text.indexOf('\r\n', start);
    if (end < 0) end = text.length;
    const colon = text.indexOf(':', start);
    if (colon <= start || colon > end) return `malformed header line: ${JSON.stringify(text.slice(start, start + 40))}`;
    const rawName = text.slice(start, colon);
    if (!isFieldName(rawName)) return `malformed header line: ${JSON.stringify(text.slice(start, start + 40))}`;
    const name = rawName.length === 10 || rawName.length >= 12 ? rawName.toLowerCase() : '';
    if (name !== '') {
      const value = text.slice(colon + 1, end).trim();
      if (name === 'content-length') {
        // Repeated or comma-listed lengths must agree (RFC 9110 8.6).
        for (const part of value.split(',')) {
          const digits = part.trim();
          if (!/^\d{1,15}$/.test(digits)) return `invalid Content-Length ${JSON.stringify(value.slice(0, 40))}`;
          if (contentLength !== undefined && contentLength !== Number(digits))
            return 'conflicting Content-Length headers';
          contentLength = Number(digits);
        }
      } else if (name === 'content-type') contentType = contentType === undefined ? value : contentType;
      else if (name === 'transfer-encoding')
        transferEncoding = transferEncoding === undefined ? value : `${transferEncoding}, ${value}`;
      else if (name === 'connection') connection += `,${value.toLowerCase()}`;
      else if (name === 'keep-alive') keepAliveHeader = value;
    }
    start = end + 2;
  }
  let keepAlive = http11 ? !hasToken(connection, 'close') : hasToken(connection, 'keep-alive');
  let body: ResponseHead['body'];
  if ((status >= 100 && status < 200) || status === 204 || status === 304) body = 'none';
  else if (transferEncoding !== undefined) {
    const codings = transferEncoding.toLowerCase().split(',');
    if (codings.length > 1 || codings[0].trim() !== 'chunked')
      return `unsupported Transfer-Encoding ${JSON.stringify(transferEncoding.slice(0, 40))}`;
    body = 'chunked';
    // Both framings given: chunked wins, and the connection is not to be trusted after (RFC 9112 6.3).
    if (contentLength !== undefined) keepAlive = false;
  } else if (contentLength !== undefined) body = { length: contentLength };
  else {
    body = 'until-close';
    keepAlive = false;
  }
  const hint = keepAliveHeader === undefined ? null : /(?:^|[\s,])timeout\s*=\s*(\d+)/i.exec(keepAliveHeader);
  return { status, contentType, keepAlive, keepAliveHintMs: hint ? Number(hint[1]) * 1000 : undefined, body };
}

/** One request's bytes and where its answer goes; waits in its pod's queue until a connection is free. */
class Exchange implements PodRequest {
  readonly pool: PodPool;
  readonly head: string;
  readonly body: Uint8Array;
  readonly handler: PodResponseHandler;
  readonly idleMs: number;
  connection: PodConnection | undefined;
  /** Retried once on a fresh connection after a kept-alive one was found closed. */
  retried = false;
  done = false;

  constructor(pool: PodPool, head: string, body: Uint8Array, handler: PodResponseHandler, idleMs: number) {
    this.pool = pool;
    this.head = head;
    this.body = body;
    this.handler = handler;
    this.idleMs = idleMs;
  }

  abort(): void {
    if (this.done) return;
    this.done = true;
    if (this.connection) this.connection.drop();
    else this.pool.unqueue(this);
  }

  resume(): void {
    if (!this.done) this.connection?.resume();
  }
}

/** One pod's connections: idle ones (most recently used last), how many are open, and who waits. */
class PodPool {
  readonly client: PodClient;
  readonly address: string;
  readonly host: string;
  readonly port: number;
  readonly idle: PodConnection[] = [];
  readonly queue: Exchange[] = [];
  readonly connections = new Set<PodConnection>();

  constructor(client: PodClient, address: string) {
    this.client = client;
    this.address = address;
    const colon = address.lastIndexOf(':');
    const host = colon < 0 ? address : address.slice(0, colon);
    this.host = host.startsWith('[') ? host.slice(1, -1) : host;
    this.port = colon < 0 ? 80 : Number(address.slice(colon + 1));
  }

  send(exchange: Exchange, fresh = false): void {
    if (!fresh) {
      const now = performance.now();
      for (let conn = this.idle.pop(); conn !== undefined; conn = this.idle.pop()) {
        if (now - conn.idleSince < conn.keepAliveMs) return conn.send(exchange);
        conn.drop(); // past the server's keep-alive: it may be closing it right now
      }
    }
    if (this.connections.size < this.client.maxConnectionsPerPod) return new PodConnection(this).send(exchange);
    this.queue.push(exchange);
  }

  unqueue(exchange: Exchange): void {
    const at = this.queue.indexOf(exchange);
    if (at >= 0) this.queue.splice(at, 1);
  }

  /** A connection finished its exchange and may be reused. */
  release(conn: PodConnection): void {
    if (this.client.closed) return conn.drop();
    const next = this.queue.shift();
    if (next !== undefined) return conn.send(next);
    conn.idleSince = performance.now();
    this.idle.push(conn);
  }

  /** A connection closed: it leaves the pool, and its place goes to whoever waits. */
  closed(conn: PodConnection): void {
    this.connections.delete(conn);
    const at = this.idle.indexOf(conn);
    if (at >= 0) this.idle.splice(at, 1);
    const next = this.queue.shift();
    if (next !== undefined) this.send(next);
  }
}

class PodConnection {
  readonly #pool: PodPool;
  readonly socket: Socket;
  readonly #maxHeaderBytes: number;
  #closed = false;
  #exchange: Exchange | undefined;
  /** Exchanges this connection carried before the current one (a reused connection may be found closed). */
  #served = 0;
  /** Bytes of the current exchange's answer read so far. */
  #answerBytes = 0;
  idleSince = 0;
  keepAliveMs: number;
  #state: ReadState = 'idle';
  #keepAlive = true;
  /** Content-Length bytes still to come. */
  #remaining = 0;
  readonly #chunked: ChunkedDecoder;
  /** A head cut by a read boundary, kept until its end arrives. */
  #headParts: Buffer | undefined;
  /** Body segments [start, end) of the current read, copied out into one Buffer at its end. */
  readonly #segments: number[] = [];
  #paused = false;
  #idleTimer: NodeJS.Timeout | undefined;

  constructor(pool: PodPool) {
    this.#pool = pool;
    this.#maxHeaderBytes = pool.client.maxHeaderBytes;
    this.#chunked = new ChunkedDecoder(this.#maxHeaderBytes);
    this.keepAliveMs = pool.client.keepAliveMs;
    pool.connections.add(this);
    sharedReadBuffer ??= Buffer.allocUnsafe(READ_BUFFER_BYTES);
    const socket = connect({
      host: pool.host,
      port: pool.port,
      noDelay: true,
      keepAlive: true,
      keepAliveInitialDelay: 60_000,
      onread: { buffer: sharedReadBuffer, callback: (n: number): boolean => this.#onRead(n) },
    });
    socket.on('error', (err) => this.#lost(describeError(err)));
    socket.on('end', () => this.#eof());
    socket.on('close', () => this.#lost('connection closed before the answer ended'));
    this.socket = socket;
  }

  send(exchange: Exchange): void {
    this.#exchange = exchange;
    exchange.connection = this;
    this.#state = 'head';
    this.#answerBytes = 0;
    this.#keepAlive = true;
    this.#headParts = undefined;
    const { head, body } = exchange;
    if (body.byteLength <= JOINED_WRITE_BYTES) {
      const bytes = Buffer.allocUnsafe(head.length + body.byteLength);
      bytes.write(head, 0, 'latin1');
      bytes.set(body, head.length);
      this.socket.write(bytes);
    } else {
      this.socket.cork();
      this.socket.write(head, 'latin1');
      this.socket.write(body);
      this.socket.uncork();
    }
  }

  resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    this.socket.resume();
    this.#armIdle();
  }

  /** Closes the connection; the exchange on it (if any) gets no callback. */
  drop(): void {
    if (this.#exchange) this.#exchange.connection = undefined;
    this.#exchange = undefined;
    this.#close();
  }

  #close(): void {
    this.#state = 'idle';
    this.#clearIdle();
    if (this.#closed) return;
    this.#closed = true;
    this.socket.destroy();
    this.#pool.closed(this);
  }

  /** `n` new bytes at the start of the shared read buffer. Returns whether to go on reading. */
  #onRead(n: number): boolean {
    const exchange = this.#exchange;
    if (exchange === undefined || this.#closed) {
      // Nothing was asked: without pipelining these bytes can't be anyone's answer.
      this.#close();
      return false;
    }
    this.#answerBytes += n;
    const buf = sharedReadBuffer!;
    const failure = this.#read(buf, 0, n);
    // Whatever body this read held goes out first, as one Buffer the handler keeps.
    const segments = this.#segments;
    let more = true;
    if (segments.length > 0) {
      let total = 0;
      for (let s = 0; s < segments.length; s += 2) total += segments[s + 1] - segments[s];
      const chunk = Buffer.allocUnsafe(total);
      let at = 0;
      for (let s = 0; s < segments.length; s += 2) at += buf.copy(chunk, at, segments[s], segments[s + 1]);
      segments.length = 0;
      more = exchange.handler.data(chunk);
      if (exchange.done || this.#exchange !== exchange) return false; // aborted from inside the handler
    }
    if (failure !== undefined) return (this.#fail(failure), false);
    if (this.#state === 'ended') {
      this.#complete(exchange);
      return !this.#closed;
    }
    if (!more) {
      this.#paused = true;
      this.#clearIdle();
      return false;
    }
    if (this.#state !== 'head') this.#armIdle();
    return true;
  }

  /** The exchange's answer ended: the connection is kept unless the server said otherwise or sent more than asked. */
  #complete(exchange: Exchange): void {
    this.#exchange = undefined;
    exchange.connection = undefined;
    exchange.done = true;
    this.#state = 'idle';
    this.#clearIdle();
    this.#served++;
    if (this.#keepAlive && !this.#closed) this.#pool.release(this);
    else this.#close();
    exchange.handler.end();
  }

  /** Closes the connection; the exchange on it (if any) fails with `message`. */
  abandon(message: string): void {
    this.#fail(message);
  }

  #fail(message: string): void {
    const exchange = this.#exchange;
    this.drop();
    if (exchange === undefined || exchange.done) return;
    exchange.done = true;
    exchange.handler.error(new Error(message));
  }

  /** The server closed its side: the end of a body read until close, else a failure. */
  #eof(): void {
    if (this.#state === 'until-close' && this.#exchange) {
      this.#keepAlive = false;
      this.#complete(this.#exchange);
      return;
    }
    this.#lost('the pod closed the connection before the answer ended');
  }

  #lost(message: string): void {
    const exchange = this.#exchange;
    if (exchange === undefined || exchange.done) return this.#close();
    // A kept-alive connection the server closed as the request went out: nothing says the pod is at fault.
    if (this.#served > 0 && this.#answerBytes === 0 && !exchange.retried) {
      exchange.retried = true;
      this.drop();
      exchange.connection = undefined;
      return this.#pool.send(exchange, true);
    }
    this.#fail(message);
  }

  #armIdle(): void {
    const exchange = this.#exchange;
    if (exchange === undefined || this.#paused) return;
    if (this.#idleTimer) this.#idleTimer.refresh();
    else
      this.#idleTimer = setTimeout(
        () => this.#fail(`timed out waiting for the body (no bytes for ${exchange.idleMs} ms)`),
        exchange.idleMs,
      );
  }

  #clearIdle(): void {
    if (this.#idleTimer) {
      clearTimeout(this.#idleTimer);
      this.#idleTimer = undefined;
    }
  }

  /** Reads buf[i, end) of the current answer; returns why it failed, if it did. */
  #read(buf: Buffer, i: number, end: number): string | undefined {
    while (i < end) {
      switch (this.#state) {
        case 'head': {
          const next = this.#readHead(buf, i, end);
          if (typeof next === 'string') return next;
          i = next;
          break;
        }
        case 'length': {
          const to = Math.min(end, i + this.#remaining);
          this.#remaining -= to - i;
          this.#segments.push(i, to);
          i = to;
          if (this.#remaining === 0) this.#state = 'ended';
          break;
        }
        case 'until-close':
          this.#segments.push(i, end);
          i = end;
          break;
        case 'chunked': {
          const next = this.#chunked.read(buf, i, end, this.#segments);
          if (typeof next === 'string') return next;
          i = next;
          if (this.#chunked.ended) this.#state = 'ended';
          break;
        }
        case 'ended':
          // Bytes after the answer, in the same read: nobody asked for them.
          this.#keepAlive = false;
          return undefined;
        case 'idle':
          return 'bytes with no request sent'; // not reached: #onRead drops the connection first
      }
    }
    return undefined;
  }

  /** Reads head bytes from buf[i, end); returns the index after what it used, or why the head is refused. */
  #readHead(buf: Buffer, i: number, end: number): number | string {
    const max = this.#maxHeaderBytes;
    if (this.#headParts === undefined) {
      // Usually the whole head is in the first read: found and parsed in place.
      const at = buf.subarray(i, end).indexOf(HEAD_END);
      if (at >= 0 && at <= max) return this.#startBody(buf.toString('latin1', i, i + at), i + at + 4);
      if (end - i >= max + 4) return `response head larger than ${max} bytes`;
      this.#headParts = Buffer.from(buf.subarray(i, end));
      return end;
    }
    const before = this.#headParts.length;
    const joined = Buffer.concat([this.#headParts, buf.subarray(i, Math.min(end, i + max + 4))]);
    const at = joined.indexOf(HEAD_END, Math.max(0, before - 3));
    if (at < 0 || at > max) {
      if (joined.length >= max + 4) return `response head larger than ${max} bytes`;
      this.#headParts = joined;
      return end;
    }
    this.#headParts = undefined;
    // The bytes of this read past the head are the body's.
    return this.#startBody(joined.toString('latin1', 0, at), i + (at + 4 - before));
  }

  /** The head is in: hand it to the handler and set up the body's framing. */
  #startBody(text: string, next: number): number | string {
    const head = parseResponseHead(text);
    if (typeof head === 'string') return head;
    if (head.status >= 100 && head.status < 200) {
      if (head.status === 101) return 'unexpected protocol switch (101)';
      return next; // an interim answer: the final head follows
    }
    this.#keepAlive = head.keepAlive;
    if (head.keepAliveHintMs !== undefined) {
      const ms = Math.min(head.keepAliveHintMs - KEEP_ALIVE_MARGIN_MS, this.#pool.client.maxKeepAliveMs);
      if (ms <= 0) this.#keepAlive = false;
      else this.keepAliveMs = ms;
    }
    const body = head.body;
    if (body === 'none' || (typeof body === 'object' && body.length === 0)) this.#state = 'ended';
    else if (body === 'chunked') {
      this.#state = 'chunked';
      this.#chunked.reset();
    } else if (body === 'until-close') this.#state = 'until-close';
    else {
      this.#state = 'length';
      this.#remaining = body.length;
    }
    this.#exchange!.handler.head(head.status, head.contentType);
    return next;
  }
}

/**
 * Kept-alive HTTP/1.1 connections to pods, shared by every request of the agent. POST only, one
 * request per connection at a time, answers read as they arrive.
 */
export class PodClient {
  readonly maxConnectionsPerPod: number;
  readonly keepAliveMs: number;
  readonly maxKeepAliveMs: number;
  readonly maxHeaderBytes: number;
  readonly #pools = new Map<string, PodPool>();
  closed = false;

  constructor(options: PodClientOptions) {
    this.maxConnectionsPerPod = options.maxConnectionsPerPod;
    this.keepAliveMs = options.keepAliveMs ?? DEFAULTS.keepAliveMs;
    this.maxKeepAliveMs = options.maxKeepAliveMs ?? DEFAULTS.maxKeepAliveMs;
    this.maxHeaderBytes = options.maxHeaderBytes ?? DEFAULTS.maxHeaderBytes;
  }

  /**
   * POSTs `body` to `http://address/path` with `headers` (plus host and content-length). The
   * answer goes to `handler`; a header that could split the request fails the exchange at once.
   */
  post(
    address: string,
    path: string,
    headers: Readonly<Record<string, string>>,
    body: Uint8Array,
    handler: PodResponseHandler,
    idleMs: number,
  ): PodRequest {
    let head = `POST ${path} HTTP/1.1\r\nhost: ${address}\r\ncontent-length: ${body.byteLength}\r\n`;
    let invalid: string | undefined;
    for (const name in headers) {
      const value = headers[name];
      if (!isFieldName(name) || breaksLine(value)) invalid = name;
      head += `${name}: ${value}\r\n`;
    }
    head += '\r\n';
    let pool = this.#pools.get(address);
    if (pool === undefined) {
      pool = new PodPool(this, address);
      this.#pools.set(address, pool);
    }
    const exchange = new Exchange(pool, head, body, handler, idleMs);
    if (this.closed || invalid !== undefined || breaksLine(path) || path.includes(' ')) {
      exchange.done = true;
      const why = this.closed
        ? 'the pod client is closed'
        : invalid !== undefined
          ? `invalid request header ${JSON.stringify(invalid)}`
          : 'invalid request path';
      queueMicrotask(() => handler.error(new Error(why)));
      return exchange;
    }
    pool.send(exchange);
    return exchange;
  }

  /** Open connections, all pods together. */
  get connections(): number {
    let n = 0;
    for (const pool of this.#pools.values()) n += pool.connections.size;
    return n;
  }

  /** Closes every connection (the agent calls it after draining); exchanges in flight or queued fail. */
  async close(): Promise<void> {
    this.closed = true;
    const closing: Promise<unknown>[] = [];
    for (const pool of this.#pools.values()) {
      for (const exchange of pool.queue.splice(0)) {
        exchange.done = true;
        exchange.handler.error(new Error('the pod client is closed'));
      }
      for (const conn of [...pool.connections]) {
        if (!conn.socket.closed) closing.push(new Promise((resolve) => conn.socket.once('close', resolve)));
        conn.abandon('the pod client is closed');
      }
    }
    await Promise.all(closing);
  }
}
