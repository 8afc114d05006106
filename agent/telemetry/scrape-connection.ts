// The scraper's HTTP client for one pod: an undici `Client` (one kept-alive connection, public
// API, `dispatch` with handler callbacks) on which the same GET is sent again and again, one at a
// time. undici's parser (llhttp) frames the answer; its body bytes go straight to the sink (the
// page reader, page-fetch.ts), so a page is parsed as it arrives and never exists whole. undici
// refuses answers outside HTTP/1.1's grammar, drops a connection carrying bytes nobody asked for,
// and closes it after `Connection: close` or HTTP/1.0. A response never waits on this class alone:
// the caller bounds each scrape by its own timeout and calls `abort` (the scraper's scrape timeout),
// which drops the connection; the next `get` reconnects.
import { Client, type Dispatcher } from 'undici';
import { describeError } from '../../shared/describe-error.ts';

/** Where a response goes. Called in order: `head`, any number of `data`, then `end`; or `error` at any point. */
export interface ResponseSink {
  /** The final status and the body's content coding (lower case, `identity` when none). */
  head(status: number, contentEncoding: string): void;
  /** Body bytes, framing removed. Read them before returning; the bytes are not the sink's to keep. */
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
  /** Limit for a response's status line and headers. */
  maxHeaderBytes?: number;
  /** An idle connection is reused this long at most (ms): below the server's keep-alive. */
  idleReuseMs?: number;
}

const DEFAULTS = { maxHeaderBytes: 16 * 1024, idleReuseMs: 4_000 };

/** One GET's callbacks from undici, handed on to its sink until it ends or is aborted. */
class Exchange implements Dispatcher.DispatchHandler {
  readonly sink: ResponseSink;
  readonly #connection: ScrapeConnection;
  #controller: Dispatcher.DispatchController | undefined;
  #stopped = false;

  constructor(connection: ScrapeConnection, sink: ResponseSink) {
    this.#connection = connection;
    this.sink = sink;
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    if (this.#stopped) controller.abort(new Error('scrape aborted'));
  }

  onResponseStart(
    _controller: Dispatcher.DispatchController,
    status: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    if (this.#stopped) return;
    const coding = headers['content-encoding'];
    this.sink.head(status, typeof coding === 'string' ? coding.trim().toLowerCase() : 'identity');
  }

  onResponseData(_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (!this.#stopped) this.sink.data(chunk);
  }

  onResponseEnd(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#connection.ended(this);
    this.sink.end();
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#connection.ended(this);
    this.sink.error(describeError(error));
  }

  /** Stops the exchange without a callback. */
  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#controller?.abort(new Error('scrape aborted'));
  }
}

/** One pod's kept-alive connection for its scrapes. */
export class ScrapeConnection {
  readonly #options: ScrapeConnectionOptions;
  readonly #client: Client;
  readonly #headers: Record<string, string>;
  /** The exchange in flight. */
  #current: Exchange | undefined;

  constructor(options: ScrapeConnectionOptions) {
    this.#options = options;
    this.#headers = { ...options.headers };
    const idleReuseMs = options.idleReuseMs ?? DEFAULTS.idleReuseMs;
    this.#client = new Client(`http://${options.address}`, {
      pipelining: 1,
      // Servers close idle connections (uvicorn after 5 s); one closed as a scrape is sent costs
      // a failed scrape, so ours is dropped first. A server's own hint is taken when shorter.
      keepAliveTimeout: idleReuseMs,
      keepAliveMaxTimeout: idleReuseMs,
      maxHeaderSize: options.maxHeaderBytes ?? DEFAULTS.maxHeaderBytes,
      // The scraper's timeout bounds each scrape (it calls abort).
      headersTimeout: 0,
      bodyTimeout: 0,
    });
    this.request(options.path);
  }

  /** The target of a GET with this connection's headers: checked once, used for many `get`s. */
  request(target: string): string {
    if (!/^\/[\x21-\x7e]*$/.test(target)) throw new Error(`not a request target: ${JSON.stringify(target)}`);
    return target;
  }

  /**
   * Sends the request (the `path` of the options, or one checked by `request`); the answer goes
   * to `sink`. One at a time: a second `get` before the end throws.
   */
  get(sink: ResponseSink, target: string = this.#options.path): void {
    if (this.#current !== undefined) throw new Error('a request is already in flight on this connection');
    const exchange = new Exchange(this, sink);
    this.#current = exchange;
    // undici reports every failure, a synchronous one too, through onResponseError.
    this.#client.dispatch({ path: target, method: 'GET', headers: this.#headers }, exchange);
  }

  /** Called by the exchange when it ends either way. */
  ended(exchange: Exchange): void {
    if (this.#current === exchange) this.#current = undefined;
  }

  /** Ends `sink`'s response now, without a callback; its connection is dropped. */
  abort(sink: ResponseSink): void {
    const current = this.#current;
    if (current === undefined || current.sink !== sink) return;
    this.#current = undefined;
    current.stop();
  }

  /** Drops the connection; a response in flight ends without a callback. */
  async close(): Promise<void> {
    this.#current?.stop();
    this.#current = undefined;
    await this.#client.destroy().catch(() => {});
  }
}
