// The scraper's HTTP client: one kept-alive HTTP/1.1 connection to one pod, on which the same GET
// is sent again and again, one at a time. Everything else in the agent uses undici; scrapes don't
// because they are the one request made tens of times a second per pod for its whole life, and
// undici's general machinery (request objects, header lists, the llhttp parser, a Buffer per
// read, stream and promise plumbing) cost 0.21–0.24 ms of CPU per exchange against 0.08 ms for
// this (bench:scrape, HTTP-only rows, side by side; 40 KB pages on loopback). Here the socket
// reads into one buffer owned by the connection (`onread`), the response head is parsed once as
// text, and the body goes to the sink as views of that buffer, framing removed (Content-Length,
// chunked, or until close).
//
// Two parts: `ResponseReader`, the pure HTTP/1.1 response reader (bytes in any pieces → head,
// body, end), and `ScrapeConnection`, the socket around it. Robustness is the point of keeping
// it small: a response head, a chunk-size line and trailers have a size limit; anything outside
// HTTP/1.1's grammar ends the response with an error and drops the connection; bytes no request
// asked for drop it too (no pipelining, so they cannot be trusted); a server's `Connection:
// close` (or an HTTP/1.0 answer) closes it after the response; a connection idle longer than
// `idleReuseMs` is replaced rather than reused (servers close idle ones; uvicorn after 5 s), and a
// socket error or close fails the response in flight. A response never waits on this class
// alone: the caller bounds each request by its own timeout and calls `abort` (the scraper's scrape
// timeout), which destroys the socket; the next `get` reconnects.
import { connect, type Socket } from 'node:net';
import { describeError } from '../../shared/describe-error.ts';
import { ChunkedDecoder } from '../../shared/http1-chunked.ts';
import { HEAD_END, hasToken, isFieldName } from '../../shared/http1.ts';

/** Where a response goes. Called in order: `head`, any number of `data`, then `end`; or `error` at any point. */
export interface ResponseSink {
  /** The final status and the body's content coding (lower case, `identity` when none). */
  head(status: number, contentEncoding: string): void;
  /** Body bytes, framing removed. The buffer is the connection's and is reused once this returns. */
  data(chunk: Buffer): void;
  end(): void;
  /** The response failed (no `end` follows); the connection was dropped. */
  error(message: string): void;
}

export interface ScrapeConnectionOptions {
  /** `host:port` (`[v6]:port` for IPv6); port 80 when absent. */
  address: string;
  /** The request target `get` asks for unless given another (`request`). */
  path: string;
  /** Request headers besides Host. */
  headers: Readonly<Record<string, string>>;
  /** Limit for a response's status line and headers, a chunk-size line, and a chunked body's trailers. */
  maxHeaderBytes?: number;
  /** An idle connection at least this old (ms) is replaced, not reused: below the server's keep-alive. */
  idleReuseMs?: number;
  /** Size of the one buffer the socket reads into. */
  readBufferBytes?: number;
}

const DEFAULTS = { maxHeaderBytes: 16 * 1024, idleReuseMs: 4_000, readBufferBytes: 64 * 1024 };

// Where the response being read is. Strings, not an enum: node runs this file as it is.
type ReadState =
  | 'head'
  | 'length' // Content-Length bytes left in #remaining
  | 'until-close'
  | 'chunked' // in #chunked's hands
  | 'ended'
  | 'failed';

interface Head {
  status: number;
  keepAlive: boolean;
  contentEncoding: string;
  /** How the body is framed, or why the head is refused. */
  body: { length: number } | 'chunked' | 'until-close' | 'none' | { error: string };
}

/** A three-digit status code at `text[i, i + 3)`, or -1. */
function statusAt(text: string, i: number): number {
  let code = 0;
  for (let k = i; k < i + 3; k++) {
    const d = text.charCodeAt(k) - 48;
    if (!(d >= 0 && d <= 9)) return -1;
    code = code * 10 + d;
  }
  return code;
}

/**
 * The response head's text (status line and header lines, without the blank line). Read in place
 * (it comes with every scrape): only the four headers that frame the body are sliced out.
 */
export function parseHead(text: string): Head | { error: string } {
  let lineEnd = text.indexOf('\r\n');
  if (lineEnd < 0) lineEnd = text.length;
  // HTTP/1.x SP 3DIGIT, then SP or the end of the line
  const code = lineEnd >= 12 && text.startsWith('HTTP/1.') && text.charCodeAt(8) === 32 ? statusAt(text, 9) : -1;
  const minor = text.charCodeAt(7);
  if (code < 0 || (minor !== 48 && minor !== 49) || (lineEnd > 12 && text.charCodeAt(12) !== 32))
    return { error: `not an HTTP/1.x status line: ${JSON.stringify(text.slice(0, Math.min(lineEnd, 40)))}` };
  let connection = '';
  let transferEncoding: string | undefined;
  let contentLength: string | undefined;
  let contentEncoding = 'identity';
  for (let start = lineEnd + 2; start <= text.length;) {
    let end = text.indexOf('\r\n', start);
    if (end < 0) end = text.length;
    const colon = text.indexOf(':', start);
    // A field name is a token: no blanks before the colon (obs-fold continuation lines are refused too).
    if (colon < 0 || colon > end || !isFieldName(text, start, colon))
      return { error: `malformed header line: ${JSON.stringify(text.slice(start, Math.min(end, start + 40)))}` };
    const length = colon - start;
    // Only names as long as one of the four read below are lower-cased and compared.
    const name =
      length === 10 || length === 14 || length === 16 || length === 17 ? text.slice(start, colon).toLowerCase() : '';
    if (name === 'content-length') {
      const value = text.slice(colon + 1, end).trim();
      // Repeated or comma-listed lengths must agree (RFC 9110 8.6).
      for (const part of value.split(',')) {
        const digits = part.trim();
        if (!/^\d{1,15}$/.test(digits))
          return { error: `invalid Content-Length ${JSON.stringify(value.slice(0, 40))}` };
        if (contentLength !== undefined && Number(contentLength) !== Number(digits))
          return { error: 'conflicting Content-Length headers' };
        contentLength = digits;
      }
    } else if (name === 'transfer-encoding') {
      const value = text.slice(colon + 1, end).trim();
      transferEncoding = transferEncoding === undefined ? value : `${transferEncoding}, ${value}`;
    } else if (name === 'connection') {
      connection += `,${text
        .slice(colon + 1, end)
        .trim()
        .toLowerCase()}`;
    } else if (name === 'content-encoding') {
      contentEncoding =
        text
          .slice(colon + 1, end)
          .trim()
          .toLowerCase() || 'identity';
    }
    start = end + 2;
  }
  let keepAlive = minor === 49 ? !hasToken(connection, 'close') : hasToken(connection, 'keep-alive');
  let body: Head['body'];
  if ((code >= 100 && code < 200) || code === 204 || code === 304) body = 'none';
  else if (transferEncoding !== undefined) {
    const codings = transferEncoding.toLowerCase().split(',');
    if (codings[codings.length - 1].trim() !== 'chunked')
      body = { error: `unsupported Transfer-Encoding ${JSON.stringify(transferEncoding.slice(0, 40))}` };
    else if (codings.length > 1) body = { error: `unsupported Transfer-Encoding ${JSON.stringify(transferEncoding)}` };
    else body = 'chunked';
    // Both framings given: chunked wins, and the connection is not to be trusted after (RFC 9112 6.3).
    if (contentLength !== undefined) keepAlive = false;
  } else if (contentLength !== undefined) body = { length: Number(contentLength) };
  else {
    body = 'until-close';
    keepAlive = false;
  }
  return { status: code, keepAlive, contentEncoding, body };
}

/**
 * Reads one HTTP/1.1 response after another from bytes in any pieces: no I/O, no timers. `read`
 * calls the sink's `head` and `data` and says when the response has ended or failed; calling the
 * sink's `end` or `error` then is the caller's (the connection drops its socket first).
 */
export class ResponseReader {
  readonly #maxHeaderBytes: number;
  /** A response head that arrived in more than one piece, copied here until it is whole. */
  readonly #headBuffer: Buffer;
  #headLength = 0;
  #sink: ResponseSink | undefined;
  #state: ReadState = 'head';
  /** Content-Length bytes still to come. */
  #remaining = 0;
  readonly #chunked: ChunkedDecoder;
  /** Data ranges [start, end) the chunked reader found in the current piece. */
  readonly #segments: number[] = [];
  /** The last response lets the connection be reused (HTTP/1.1 without `Connection: close`, a clean framing). */
  keepAlive = true;
  /** Why the last response failed. */
  error = '';
  /** Bytes followed the end of the last response in the same piece (nobody asked for them). */
  extra = false;

  constructor(maxHeaderBytes = DEFAULTS.maxHeaderBytes) {
    this.#maxHeaderBytes = maxHeaderBytes;
    this.#headBuffer = Buffer.allocUnsafe(maxHeaderBytes);
    this.#chunked = new ChunkedDecoder(maxHeaderBytes);
  }

  /** Starts reading a response for `sink`. */
  begin(sink: ResponseSink): void {
    this.#sink = sink;
    this.#state = 'head';
    this.#headLength = 0;
    this.keepAlive = true;
    this.error = '';
    this.extra = false;
  }

  /** Stops reading for the sink (it gave up); `read` returns at once. */
  cancel(): void {
    this.#sink = undefined;
  }

  /**
   * Reads `buf[i, end)`: 'more' when the response needs more bytes, 'ended' or 'failed' (see
   * `error`) when it is over; 'cancelled' when the sink gave up while being called.
   */
  read(buf: Buffer, i: number, end: number): 'more' | 'ended' | 'failed' | 'cancelled' {
    const sink = this.#sink;
    if (sink === undefined) return 'cancelled';
    while (i < end) {
      switch (this.#state) {
        case 'head':
          i = this.#readHead(buf, i, end);
          break;
        case 'length': {
          const to = Math.min(end, i + this.#remaining);
          this.#remaining -= to - i;
          sink.data(buf.subarray(i, to));
          i = to;
          if (this.#remaining === 0) this.#state = 'ended';
          break;
        }
        case 'until-close':
          sink.data(buf.subarray(i, end));
          i = end;
          break;
        case 'chunked': {
          const segments = this.#segments;
          segments.length = 0;
          const next = this.#chunked.read(buf, i, end, segments);
          for (let k = 0; k < segments.length; k += 2) {
            sink.data(buf.subarray(segments[k], segments[k + 1]));
            if (this.#sink !== sink) return 'cancelled';
          }
          if (typeof next === 'string') this.#fail(next);
          else {
            i = next;
            if (this.#chunked.ended) this.#state = 'ended';
          }
          break;
        }
      }
      if (this.#state === 'failed') return 'failed';
      if (this.#sink !== sink) return 'cancelled';
      if (this.#state === 'ended') {
        this.extra = i < end;
        this.#sink = undefined;
        return 'ended';
      }
    }
    return 'more';
  }

  /** The server closed the connection: the end of a body read until close; any other response failed. */
  eof(): 'ended' | 'failed' {
    if (this.#state === 'until-close') {
      this.#sink = undefined;
      return 'ended';
    }
    this.#fail('connection closed before the response ended');
    return 'failed';
  }

  #fail(message: string): void {
    this.error = message;
    this.#state = 'failed';
    this.#sink = undefined;
  }

  /** Reads head bytes from buf[i, end); returns the index after what it used. */
  #readHead(buf: Buffer, i: number, end: number): number {
    if (this.#headLength === 0) {
      // Usually the whole head is in the first piece: found and parsed in place.
      // Searched in place (no view): bytes past `end` are an earlier read's, so a match must end by then.
      const at = buf.indexOf(HEAD_END, i);
      if (at >= 0 && at + HEAD_END.length <= Math.min(end, i + this.#maxHeaderBytes))
        return this.#startBody(buf.toString('latin1', i, at), at + HEAD_END.length);
    }
    // A head cut by a piece boundary: kept until its end arrives.
    const before = this.#headLength;
    const take = Math.min(end - i, this.#maxHeaderBytes - before);
    buf.copy(this.#headBuffer, before, i, i + take);
    this.#headLength += take;
    const at = this.#headBuffer.subarray(0, this.#headLength).indexOf(HEAD_END, Math.max(0, before - 3));
    if (at < 0) {
      if (this.#headLength >= this.#maxHeaderBytes)
        this.#fail(`response head larger than ${this.#maxHeaderBytes} bytes`);
      return i + take;
    }
    this.#headLength = 0;
    // The bytes of this piece past the head are the body's.
    return this.#startBody(this.#headBuffer.toString('latin1', 0, at), i + (at + HEAD_END.length - before));
  }

  /** The head is in: hand it to the sink and set up the body's framing. Returns `next`, where the body starts. */
  #startBody(text: string, next: number): number {
    const head = parseHead(text);
    if ('error' in head) {
      this.#fail(head.error);
      return next;
    }
    const body = head.body;
    if (typeof body === 'object' && 'error' in body) {
      this.#fail(body.error);
      return next;
    }
    if (head.status >= 100 && head.status < 200) {
      if (head.status === 101) this.#fail('unexpected protocol switch (101)');
      return next; // an interim answer: the final head follows
    }
    this.keepAlive = head.keepAlive;
    this.#sink?.head(head.status, head.contentEncoding);
    if (body === 'none' || (typeof body === 'object' && body.length === 0)) this.#state = 'ended';
    else if (body === 'chunked') {
      this.#state = 'chunked';
      this.#chunked.reset();
    } else if (body === 'until-close') this.#state = 'until-close';
    else {
      this.#state = 'length';
      this.#remaining = body.length;
    }
    return next;
  }
}

/** One pod's kept-alive connection: the socket around a `ResponseReader`. */
export class ScrapeConnection {
  readonly #options: ScrapeConnectionOptions;
  readonly #idleReuseMs: number;
  readonly #request: Buffer;
  readonly #readBuffer: Buffer;
  readonly #reader: ResponseReader;
  #socket: Socket | undefined;
  /** The response in flight. */
  #sink: ResponseSink | undefined;
  /** performance.now() when the connection last finished a response. */
  #idleSince = 0;

  constructor(options: ScrapeConnectionOptions) {
    this.#options = options;
    this.#idleReuseMs = options.idleReuseMs ?? DEFAULTS.idleReuseMs;
    this.#request = this.request(options.path);
    this.#readBuffer = Buffer.allocUnsafe(options.readBufferBytes ?? DEFAULTS.readBufferBytes);
    this.#reader = new ResponseReader(options.maxHeaderBytes);
  }

  /** The bytes of a GET of `target` (path and query) with this connection's headers, made once for many `get`s. */
  request(target: string): Buffer {
    if (!/^\/[\x21-\x7e]*$/.test(target)) throw new Error(`not a request target: ${JSON.stringify(target)}`);
    let request = `GET ${target} HTTP/1.1\r\nhost: ${this.#options.address}\r\n`;
    for (const [name, value] of Object.entries(this.#options.headers)) request += `${name}: ${value}\r\n`;
    return Buffer.from(`${request}\r\n`, 'latin1');
  }

  /** Whether a socket is open (connected or connecting). */
  get connected(): boolean {
    return this.#socket !== undefined;
  }

  /**
   * Sends the request (the `path` of the options, or one made by `request`); the answer goes to
   * `sink`. One at a time: a second `get` before the end throws.
   */
  get(sink: ResponseSink, request: Buffer = this.#request): void {
    if (this.#sink !== undefined) throw new Error('a request is already in flight on this connection');
    if (this.#socket !== undefined && performance.now() - this.#idleSince >= this.#idleReuseMs) this.#drop();
    this.#sink = sink;
    this.#reader.begin(sink);
    try {
      (this.#socket ?? this.#open()).write(request);
    } catch (err) {
      this.#fail(describeError(err));
    }
  }

  /** Ends `sink`'s response now, without a callback, and drops the connection (its bytes are unread). */
  abort(sink: ResponseSink): void {
    if (this.#sink !== sink) return;
    this.#sink = undefined;
    this.#reader.cancel();
    this.#drop();
  }

  /** Drops the connection; a response in flight ends without a callback. Resolves once the socket is closed. */
  close(): Promise<void> {
    const socket = this.#socket;
    this.#sink = undefined;
    this.#reader.cancel();
    this.#drop();
    if (socket === undefined || socket.closed) return Promise.resolve();
    return new Promise((resolve) => socket.once('close', () => resolve()));
  }

  #open(): Socket {
    const { hostname, port } = new URL(`http://${this.#options.address}`);
    const socket: Socket = connect({
      host: hostname.startsWith('[') ? hostname.slice(1, -1) : hostname,
      port: port === '' ? 80 : Number(port),
      noDelay: true,
      onread: { buffer: this.#readBuffer, callback: (n: number): boolean => this.#onRead(socket, n) },
    });
    socket.on('error', (err) => this.#closed(socket, describeError(err)));
    socket.on('end', () => this.#ended(socket));
    socket.on('close', () => this.#closed(socket, 'connection closed before the response ended'));
    this.#socket = socket;
    return socket;
  }

  #drop(): void {
    const socket = this.#socket;
    this.#socket = undefined;
    socket?.destroy();
  }

  /** `n` new bytes at the start of the read buffer. Returns whether to go on reading. */
  #onRead(socket: Socket, n: number): boolean {
    if (socket !== this.#socket) return false;
    if (this.#sink === undefined) {
      // Nothing was asked: without pipelining these bytes can't be anyone's answer.
      this.#drop();
      return false;
    }
    const outcome = this.#reader.read(this.#readBuffer, 0, n);
    if (outcome === 'ended') this.#complete();
    else if (outcome === 'failed') this.#fail(this.#reader.error);
    return true;
  }

  /** The server closed its side: the end of a body read until close, else a failure. */
  #ended(socket: Socket): void {
    if (socket !== this.#socket) return;
    if (this.#sink === undefined) this.#drop();
    else if (this.#reader.eof() === 'ended') this.#complete();
    else this.#fail(this.#reader.error);
  }

  #closed(socket: Socket, reason: string): void {
    if (socket !== this.#socket) return;
    if (this.#sink === undefined) this.#drop();
    else this.#fail(reason);
  }

  /** The response ended: the connection is kept unless the server said otherwise or sent more than asked. */
  #complete(): void {
    const sink = this.#sink!;
    this.#sink = undefined;
    this.#idleSince = performance.now();
    if (this.#reader.extra || !this.#reader.keepAlive) this.#drop();
    sink.end();
  }

  #fail(message: string): void {
    const sink = this.#sink;
    this.#sink = undefined;
    this.#reader.cancel();
    this.#drop();
    sink?.error(message);
  }
}
