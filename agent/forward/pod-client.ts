// Kept-alive connections to pods on undici's public API: one `Agent` (a `Pool` per pod origin)
// and `dispatch` with its handler callbacks, so an answer's bytes reach the caller as undici's
// parser (llhttp) frames them, with no stream object, async iterator or body mixin in between.
// undici parses the answer, refuses what is outside HTTP/1.1's grammar (the exchange fails before
// any byte reaches the caller), drops a connection that carries bytes nobody asked for, and keeps
// an idle connection only within the server's keep-alive hint.
import { Agent, type Dispatcher } from 'undici';

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
  /** Limit for a response head. */
  maxHeaderBytes?: number;
}

const DEFAULTS = { keepAliveMs: 30_000, maxKeepAliveMs: 300_000, maxHeaderBytes: 16 * 1024 };

/** undici's callbacks for one exchange, handed on to the caller's handler. */
class Exchange implements Dispatcher.DispatchHandler, PodRequest {
  readonly #handler: PodResponseHandler;
  #controller: Dispatcher.DispatchController | undefined;
  #aborted = false;

  constructor(handler: PodResponseHandler) {
    this.#handler = handler;
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    if (this.#aborted) controller.abort(new Error('aborted by the agent'));
  }

  onResponseStart(
    _controller: Dispatcher.DispatchController,
    status: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    if (this.#aborted) return;
    const contentType = headers['content-type'];
    this.#handler.head(status, Array.isArray(contentType) ? contentType.join(', ') : contentType);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (!this.#aborted && !this.#handler.data(chunk)) controller.pause();
  }

  onResponseEnd(): void {
    if (!this.#aborted) this.#handler.end();
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    if (!this.#aborted) this.#handler.error(error);
  }

  abort(): void {
    if (this.#aborted) return;
    this.#aborted = true;
    this.#controller?.abort(new Error('aborted by the agent'));
  }

  resume(): void {
    if (!this.#aborted) this.#controller?.resume();
  }
}

/**
 * Kept-alive HTTP/1.1 connections to pods, shared by every request of the agent: POST only, one
 * request per connection at a time (no pipelining), answers read as they arrive.
 */
export class PodClient {
  readonly #agent: Agent;
  #closed = false;

  constructor(options: PodClientOptions) {
    this.#agent = new Agent({
      connections: options.maxConnectionsPerPod,
      pipelining: 1,
      keepAliveTimeout: options.keepAliveMs ?? DEFAULTS.keepAliveMs,
      keepAliveMaxTimeout: options.maxKeepAliveMs ?? DEFAULTS.maxKeepAliveMs,
      maxHeaderSize: options.maxHeaderBytes ?? DEFAULTS.maxHeaderBytes,
      // The caller runs the deadline for the answer's head (it covers time queued for a
      // connection, which undici's does not); the body's idle time is given per request.
      headersTimeout: 0,
    });
  }

  /**
   * POSTs `body` to `http://address/path` with `headers` (plus host and content-length). The
   * answer goes to `handler`; a header or path undici refuses fails the exchange through it.
   */
  post(
    address: string,
    path: string,
    headers: Readonly<Record<string, string>>,
    body: Uint8Array,
    handler: PodResponseHandler,
    idleMs: number,
  ): PodRequest {
    const exchange = new Exchange(handler);
    if (this.#closed) {
      queueMicrotask(() => handler.error(new Error('the pod client is closed')));
      return exchange;
    }
    // undici reports every failure, a synchronous one too, through onResponseError.
    this.#agent.dispatch(
      {
        origin: `http://${address}`,
        path,
        method: 'POST',
        headers,
        body,
        headersTimeout: 0,
        bodyTimeout: idleMs,
      },
      exchange,
    );
    return exchange;
  }

  /** Closes every connection (the agent calls it after draining); exchanges in flight fail. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#agent.destroy(new Error('the pod client is closed'));
  }
}
