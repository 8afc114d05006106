// The API listener's HTTP/1.1 server on node:net: the thin I/O shell around the strict head parser
// (head.ts) and body framing (body.ts). node:http's server cost ~0.2 ms per request over this on an
// idle path (bench:proxy --serial, bare-http vs bare-own; README "Proxy overhead"), more than the
// rest of the agent's own work. What it keeps from node:http: keep-alive, HTTP/1.0, HEAD,
// `Expect: 100-continue`, pipelined requests (read one at a time: the next is not parsed until the
// answer to this one is done), a client that half-closes or resets counted as gone, and node's
// three timers (headers, whole request, keep-alive idle), each a setting, checked by one sweep per
// server rather than a timer per request. What it does not do: switch protocols (Upgrade is
// ignored, as RFC 9110 7.8 allows; CONNECT is refused), or accept anything head.ts refuses.
//
// A request the head parser or body framing refuses gets an OpenAI-shaped error with its status
// (400, 408, 413 by the request path, 414, 431, 501, 505) and `connection: close`, and the
// connection closes after it.
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { errorBody } from '../../../shared/openai/errors.ts';
import { HEAD_END, breaksLine } from '../../../shared/http1.ts';
import type { HeaderReader } from '../../forward/headers.ts';
import { clientLeft, tooLarge, type ApiRequest, type ApiResponse } from '../exchange.ts';
import { RequestError } from '../request.ts';
import { BodyFraming } from './body.ts';
import { parseRequestHead, type RequestHead } from './head.ts';

const { STATUS_CODES } = process.getBuiltinModule('node:http');

/** The server's bounds; every one is an agent setting (README "Agent configuration"). */
export interface Http1Limits {
  /** A request head's size at most, request line included (431 past it; node's maxHeaderSize). */
  maxHeaderBytes: number;
  /** Header fields per request at most (431 past it). */
  maxHeaders: number;
  /** The request target's length at most (414 past it). */
  maxTargetBytes: number;
  /** From a request's first byte to the end of its head (408 past it; against slowloris). */
  headersTimeoutMs: number;
  /** From a request's first byte to the end of its body (408 past it); 0: none. */
  requestTimeoutMs: number;
  /** An idle kept-alive connection closes after this long. */
  keepAliveTimeoutMs: number;
  /** Body bytes kept for the request path at most; past it the body is read and dropped (its 413 is the path's). */
  maxBodyBytes: number;
}

export const DEFAULT_HTTP1_LIMITS: Http1Limits = {
  maxHeaderBytes: 16 * 1024,
  maxHeaders: 100,
  maxTargetBytes: 8 * 1024,
  headersTimeoutMs: 60_000,
  requestTimeoutMs: 300_000,
  keepAliveTimeoutMs: 5_000,
  maxBodyBytes: 4 * 1024 * 1024,
};

export type Http1Handler = (req: ApiRequest, res: ApiResponse) => void;

const CRLF = Buffer.from('\r\n', 'latin1');
const LAST_CHUNK = Buffer.from('0\r\n\r\n', 'latin1');
const CONTINUE = Buffer.from('HTTP/1.1 100 Continue\r\n\r\n', 'latin1');
const LF_LF = Buffer.from('\n\n', 'latin1');

let dateSecond = 0;
let dateText = '';
/** The Date header's value, formatted once per second. */
function httpDate(): string {
  const now = Date.now();
  const second = Math.floor(now / 1000);
  if (second !== dateSecond) {
    dateSecond = second;
    dateText = new Date(now).toUTCString();
  }
  return dateText;
}

class FieldReader implements HeaderReader {
  readonly #fields: Record<string, string>;
  constructor(fields: Record<string, string>) {
    this.#fields = fields;
  }
  get(name: string): string | null {
    return this.#fields[name] ?? null;
  }
}

/** One request as the request path reads it; its body is collected as the connection reads it. */
class Http1Request implements ApiRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: HeaderReader;
  readonly remoteIp: string | undefined;
  readonly #maxBodyBytes: number;
  #chunks: Buffer[] = [];
  #total = 0;
  #ended = false;
  #failure: RequestError | undefined;
  #waiting: { limit: number; resolve: (body: Uint8Array) => void; reject: (error: Error) => void } | undefined;

  constructor(head: RequestHead, remoteIp: string | undefined, maxBodyBytes: number) {
    this.method = head.method;
    this.url = head.target;
    this.headers = new FieldReader(head.fields);
    this.remoteIp = remoteIp;
    this.#maxBodyBytes = maxBodyBytes;
  }

  readBody(limit: number): Promise<Uint8Array> {
    if (this.#failure) return Promise.reject(this.#failure);
    const cap = Math.min(limit, this.#maxBodyBytes);
    if (this.#total > cap) return Promise.reject(tooLarge(`request body exceeds the limit of ${cap} bytes`));
    if (this.#ended) return Promise.resolve(this.#body());
    return new Promise((resolve, reject) => (this.#waiting = { limit: cap, resolve, reject }));
  }

  #body(): Uint8Array {
    const chunks = this.#chunks;
    this.#chunks = [];
    return chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, this.#total);
  }

  /** Body bytes read (a view of the socket's read; kept, not copied). */
  data(chunk: Buffer): void {
    this.#total += chunk.length;
    if (this.#total > (this.#waiting?.limit ?? this.#maxBodyBytes)) {
      this.#chunks = [];
      const waiting = this.#waiting;
      this.#waiting = undefined;
      waiting?.reject(tooLarge(`request body exceeds the limit of ${waiting.limit} bytes`));
      return;
    }
    if (this.#total <= this.#maxBodyBytes) this.#chunks.push(chunk);
  }

  end(): void {
    this.#ended = true;
    const waiting = this.#waiting;
    if (waiting === undefined || this.#total > waiting.limit) return;
    // (Past maxBodyBytes nothing was kept, and a waiting reader was refused when it was passed.)
    this.#waiting = undefined;
    waiting.resolve(this.#body());
  }

  /** The body cannot be read (the client left, or its framing is refused). */
  fail(error: RequestError): void {
    if (this.#ended || this.#failure) return;
    this.#failure = error;
    this.#chunks = [];
    const waiting = this.#waiting;
    this.#waiting = undefined;
    waiting?.reject(error);
  }
}

/** One answer: its head held until the first body bytes (or the end), then written as they come. */
class Http1Response implements ApiResponse {
  readonly #conn: Connection;
  readonly #head: boolean;
  readonly #minor: 0 | 1;
  headersSent = false;
  writableFinished = false;
  #chunked = false;
  #noBody = false;
  #head_: string | undefined;
  readonly #parts: Uint8Array[] = [];
  #partBytes = 0;
  #flushQueued = false;
  /** A write returned false: 'drain' is owed, by the socket or by a flush that went through. */
  #wantDrain = false;
  #ended = false;
  #closed = false;
  #drain: (() => void)[] = [];
  #close: (() => void)[] = [];
  keepAlive: boolean;

  constructor(conn: Connection, head: RequestHead, keepAlive: boolean) {
    this.#conn = conn;
    this.#head = head.method === 'HEAD';
    this.#minor = head.minor;
    this.keepAlive = keepAlive;
  }

  get destroyed(): boolean {
    return this.#conn.socket.destroyed;
  }

  writeHead(status: number, headers: Record<string, string>): this {
    if (this.headersSent) throw new Error('the answer head was already written');
    let text = `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\n`;
    let length = false;
    for (const name in headers) {
      const value = headers[name];
      if (breaksLine(value) || breaksLine(name) || name.includes(':'))
        throw new Error(`invalid character in answer header ${JSON.stringify(name)}`);
      const lower = name.toLowerCase();
      if (lower === 'content-length') length = true;
      else if (lower === 'transfer-encoding' || lower === 'keep-alive') continue;
      else if (lower === 'connection') {
        if (value.toLowerCase() === 'close') this.keepAlive = false;
        continue;
      }
      text += `${name}: ${value}\r\n`;
    }
    this.#noBody = this.#head || status === 204 || status === 304 || status < 200;
    if (!length && !this.#noBody) {
      // A body of unknown length: chunked in HTTP/1.1, up to the close in HTTP/1.0.
      if (this.#minor === 1) this.#chunked = true;
      else this.keepAlive = false;
    }
    if (this.#conn.closing) this.keepAlive = false;
    text += this.#chunked ? 'transfer-encoding: chunked\r\n' : '';
    text += this.keepAlive
      ? `connection: keep-alive\r\nkeep-alive: timeout=${Math.floor(this.#conn.server.limits.keepAliveTimeoutMs / 1000)}\r\n`
      : 'connection: close\r\n';
    this.#head_ = `${text}date: ${httpDate()}\r\n\r\n`;
    this.headersSent = true;
    return this;
  }

  write(chunk: Uint8Array | string): boolean {
    if (this.#ended || this.#closed) return false;
    this.#add(chunk);
    if (!this.#flushQueued) {
      // Whatever this loop turn writes goes out as one write: the head with the first chunks.
      this.#flushQueued = true;
      queueMicrotask(() => this.#flush());
    }
    const socket = this.#conn.socket;
    const room = socket.writableLength + this.#partBytes < socket.writableHighWaterMark;
    if (!room) this.#wantDrain = true;
    return room;
  }

  end(chunk?: Uint8Array | string): this {
    if (this.#ended || this.#closed) return this;
    if (!this.headersSent) this.writeHead(200, {});
    this.#ended = true;
    if (chunk !== undefined) this.#add(chunk);
    if (this.#chunked) this.#push(LAST_CHUNK);
    this.#flush(() => {
      this.writableFinished = true;
      this.#done();
      this.#conn.answered(this);
    });
    return this;
  }

  destroy(): this {
    this.#conn.socket.destroy();
    return this;
  }

  #add(chunk: Uint8Array | string): void {
    if (this.#noBody) return;
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    if (bytes.byteLength === 0) return; // a zero-size chunk would end the body
    if (this.#chunked) this.#push(Buffer.from(`${bytes.byteLength.toString(16)}\r\n`, 'latin1'));
    this.#push(bytes);
    if (this.#chunked) this.#push(CRLF);
  }

  #push(bytes: Uint8Array): void {
    this.#parts.push(bytes);
    this.#partBytes += bytes.byteLength;
  }

  #flush(written?: () => void): void {
    this.#flushQueued = false;
    const socket = this.#conn.socket;
    const head = this.#head_;
    const parts = this.#parts;
    if (socket.destroyed) return;
    if (head === undefined && parts.length === 0) return void written?.();
    let bytes: Uint8Array;
    if (head !== undefined) {
      this.#head_ = undefined;
      const joined = Buffer.allocUnsafe(head.length + this.#partBytes);
      let at = joined.write(head, 0, 'latin1');
      for (const part of parts) {
        joined.set(part, at);
        at += part.byteLength;
      }
      bytes = joined;
    } else bytes = parts.length === 1 ? parts[0] : Buffer.concat(parts, this.#partBytes);
    parts.length = 0;
    this.#partBytes = 0;
    const ok = written ? socket.write(bytes, (error) => void (error ? undefined : written())) : socket.write(bytes);
    if (ok && this.#wantDrain) queueMicrotask(() => this.drained());
  }

  drained(): void {
    if (!this.#wantDrain) return;
    this.#wantDrain = false;
    for (const listener of this.#drain.slice()) listener();
  }

  /** The connection closed: an answer not yet finished is abandoned. */
  closed(): void {
    this.#done();
  }

  #done(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#drain = [];
    const listeners = this.#close;
    this.#close = [];
    for (const listener of listeners) listener();
  }

  on(event: 'drain' | 'close', listener: () => void): this {
    if (event === 'drain') this.#drain.push(listener);
    else if (this.#closed) queueMicrotask(listener);
    else this.#close.push(listener);
    return this;
  }

  once(event: 'close', listener: () => void): this {
    return this.on(event, listener); // 'close' fires once anyway
  }

  off(event: 'drain' | 'close', listener: () => void): this {
    const list = event === 'drain' ? this.#drain : this.#close;
    const at = list.indexOf(listener);
    if (at >= 0) list.splice(at, 1);
    return this;
  }
}

// Where a connection is, for the timers: waiting for a request (keep-alive), reading its head,
// reading its body, or neither (answering, with the whole request read).
type Phase = 'idle' | 'head' | 'body' | 'answering';

class Connection {
  readonly server: Http1Server;
  readonly socket: Socket;
  phase: Phase = 'idle';
  /** When the phase's clock started: the idle wait's, or the request's first byte. */
  since = performance.now();
  closing = false;
  /** Bytes read and not yet used: a head cut by a read boundary, or requests pipelined behind this one. */
  #pending: Buffer | undefined;
  #request: Http1Request | undefined;
  #response: Http1Response | undefined;
  #framing: BodyFraming | undefined;
  /** The answer to the request in hand is done (its body may still be arriving). */
  #answered = false;
  /** A protocol error was answered: nothing more is read. */
  #refused = false;

  constructor(server: Http1Server, socket: Socket) {
    this.server = server;
    this.socket = socket;
    socket.on('data', (chunk: Buffer) => this.#onData(chunk));
    // A half-close counts as leaving (as node:http's server does, without allowHalfOpen).
    socket.on('end', () => socket.destroy());
    socket.on('error', () => {});
    socket.on('close', () => this.#onClose());
    socket.on('drain', () => this.#response?.drained());
  }

  get idle(): boolean {
    return this.phase === 'idle' && this.#pending === undefined;
  }

  #onData(chunk: Buffer): void {
    if (this.#refused) return;
    if (this.#framing !== undefined) return this.#readBody(chunk, 0);
    const pending = this.#pending;
    const buf = pending === undefined ? chunk : Buffer.concat([pending, chunk]);
    this.#pending = undefined;
    if (this.#request !== undefined) {
      // The answer to the request in hand is not done: keep what follows for later, bounded.
      if (buf.length > this.server.limits.maxHeaderBytes + 64 * 1024) this.socket.pause();
      this.#pending = buf;
      return;
    }
    this.#readHeads(buf, 0);
  }

  /** Reads request heads from buf[i…] until one is in hand or the bytes run out. */
  #readHeads(buf: Buffer, i: number): void {
    const limits = this.server.limits;
    // Empty lines between requests (RFC 9112 2.2).
    while (buf[i] === 13 && buf[i + 1] === 10) i += 2;
    if (i >= buf.length) return;
    if (this.phase === 'idle') {
      this.phase = 'head';
      this.since = performance.now();
    }
    const at = buf.indexOf(HEAD_END, i);
    if (at < 0 || at - i > limits.maxHeaderBytes) {
      if (buf.length - i > limits.maxHeaderBytes)
        return this.refuse(431, `request head larger than ${limits.maxHeaderBytes} bytes`);
      // A head whose lines end with a lone LF never ends here: refused now rather than at the timeout.
      if (buf.indexOf(LF_LF, i) >= 0) return this.refuse(400, 'header lines must end with CRLF');
      this.#pending = i === 0 ? buf : buf.subarray(i);
      return;
    }
    const head = parseRequestHead(buf.toString('latin1', i, at), limits);
    if ('status' in head) return this.refuse(head.status, head.message);
    const framing = new BodyFraming(head.body, limits.maxHeaderBytes);
    const request = new Http1Request(head, this.socket.remoteAddress, limits.maxBodyBytes);
    const response = new Http1Response(this, head, head.keepAlive && !this.closing);
    this.#request = request;
    this.#response = response;
    this.#answered = false;
    this.phase = 'body';
    if (!framing.ended) {
      this.#framing = framing;
      if (head.expectContinue) {
        if (typeof head.body === 'number' && head.body > limits.maxBodyBytes) response.keepAlive = false;
        else this.socket.write(CONTINUE);
      }
    }
    const next = at + 4;
    if (this.#framing !== undefined) this.#readBody(buf, next, true);
    else {
      this.phase = 'answering';
      request.end();
      if (next < buf.length) this.#pending = buf.subarray(next);
    }
    if (this.#refused) return;
    this.server.opened(request, response);
    this.server.handle(request, response);
  }

  /** Body bytes from buf[i…]; what follows the body is kept for the next request. */
  #readBody(buf: Buffer, i: number, first = false): void {
    const framing = this.#framing!;
    const request = this.#request!;
    const next = framing.read(buf, i, buf.length);
    if (typeof next === 'string') {
      this.#framing = undefined;
      if (first) {
        // Refused before the request path saw the request: it never runs.
        this.#request = undefined;
        this.#response = undefined;
        request.fail(new RequestError(400, `malformed request body: ${next}`));
        return this.refuse(400, `malformed request body: ${next}`);
      }
      request.fail(new RequestError(400, `malformed request body: ${next}`));
      this.#response!.keepAlive = false;
      if (this.#answered) this.socket.destroy();
      return;
    }
    const segments = framing.segments;
    for (let s = 0; s < segments.length; s += 2)
      if (segments[s + 1] > segments[s]) request.data(buf.subarray(segments[s], segments[s + 1]));
    if (!framing.ended) return;
    this.#framing = undefined;
    this.phase = 'answering';
    request.end();
    if (next < buf.length) this.#pending = buf.subarray(next);
    if (this.#answered) this.#nextRequest();
  }

  /** The answer is written: on to the next request once the body is in too. */
  answered(response: Http1Response): void {
    if (response !== this.#response) return;
    this.#answered = true;
    if (!response.keepAlive) return void this.socket.destroySoon();
    if (this.#framing === undefined) this.#nextRequest();
  }

  #nextRequest(): void {
    this.#request = undefined;
    this.#response = undefined;
    this.phase = 'idle';
    this.since = performance.now();
    if (this.closing) return void this.socket.destroySoon();
    const pending = this.#pending;
    this.#pending = undefined;
    if (this.socket.isPaused()) this.socket.resume();
    if (pending !== undefined) this.#readHeads(pending, 0);
  }

  /** A protocol error: an OpenAI-shaped answer with `status`, then the connection closes. */
  refuse(status: number, message: string): void {
    this.#refused = true;
    this.#framing = undefined;
    this.#pending = undefined;
    this.phase = 'answering';
    const response = this.#response;
    if (response !== undefined && response.headersSent) return void this.socket.destroy();
    const body = JSON.stringify(errorBody(status, message, { code: 'invalid_http_request' }));
    this.socket.end(
      `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\ncontent-type: application/json\r\n` +
        `x-kinference-route: rejected\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n` +
        `date: ${httpDate()}\r\n\r\n${body}`,
    );
    this.socket.destroySoon();
  }

  #onClose(): void {
    this.server.connections.delete(this);
    this.#request?.fail(clientLeft());
    this.#response?.closed();
  }

  /** The sweep: a timer that ran out closes the connection (a 408 first when a request was being read). */
  check(now: number): void {
    const { headersTimeoutMs, requestTimeoutMs, keepAliveTimeoutMs } = this.server.limits;
    const elapsed = now - this.since;
    if (this.phase === 'idle') {
      if (elapsed >= keepAliveTimeoutMs) this.socket.destroy();
    } else if (this.phase === 'head') {
      if (elapsed >= headersTimeoutMs) this.refuse(408, `request head not received within ${headersTimeoutMs} ms`);
    } else if (this.phase === 'body' && requestTimeoutMs > 0 && elapsed >= requestTimeoutMs) {
      const message = `request not received within ${requestTimeoutMs} ms`;
      this.#request?.fail(new RequestError(408, message));
      if (this.#response?.headersSent || this.#answered) this.socket.destroy();
      else if (this.#response) this.#response.keepAlive = false;
    }
  }
}

/** The API listener's server. `on('request')` hears each request as it starts (the drain accounting). */
export class Http1Server {
  readonly limits: Http1Limits;
  readonly connections = new Set<Connection>();
  readonly #handler: Http1Handler;
  readonly #server: Server;
  readonly #requestListeners: ((req: ApiRequest, res: ApiResponse) => void)[] = [];
  #sweep: NodeJS.Timeout | undefined;
  #closing = false;

  constructor(handler: Http1Handler, limits: Partial<Http1Limits> = {}) {
    this.limits = { ...DEFAULT_HTTP1_LIMITS, ...limits };
    this.#handler = handler;
    this.#server = createServer({ noDelay: true }, (socket) => {
      if (this.#closing) return void socket.destroy();
      this.connections.add(new Connection(this, socket));
    });
  }

  listen(port: number, host: string): Promise<this> {
    return new Promise((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(port, host, () => {
        this.#server.off('error', reject);
        const { headersTimeoutMs, requestTimeoutMs, keepAliveTimeoutMs } = this.limits;
        const shortest = Math.min(headersTimeoutMs, keepAliveTimeoutMs, requestTimeoutMs || Infinity);
        // Precision of a quarter of the shortest timer, between 10 ms and 1 s (a timer never fires early).
        const every = Math.max(10, Math.min(1_000, Math.floor(shortest / 4)));
        this.#sweep = setInterval(() => this.#check(), every);
        this.#sweep.unref();
        resolve(this);
      });
    });
  }

  address(): AddressInfo {
    return this.#server.address() as AddressInfo;
  }

  on(event: 'request', listener: (req: ApiRequest, res: ApiResponse) => void): this {
    this.#requestListeners.push(listener);
    return this;
  }

  /** @internal A connection has a request in hand. */
  opened(req: ApiRequest, res: ApiResponse): void {
    for (const listener of this.#requestListeners) listener(req, res);
  }

  /** @internal */
  handle(req: ApiRequest, res: ApiResponse): void {
    this.#handler(req, res);
  }

  #check(): void {
    const now = performance.now();
    for (const conn of this.connections) conn.check(now);
  }

  /** Stops accepting; connections answer what they have and close (`closeIdleConnections` for the idle ones). */
  close(): void {
    this.#closing = true;
    for (const conn of this.connections) conn.closing = true;
    this.#server.close();
  }

  closeIdleConnections(): void {
    for (const conn of this.connections) if (conn.idle) conn.socket.destroy();
  }

  closeAllConnections(): void {
    for (const conn of this.connections) conn.socket.destroy();
    if (this.#sweep) clearInterval(this.#sweep);
  }
}
