// One concern: send one request to one pod and hand back its answer, holding the first byte
// back so a failure before it can still be retried on another pod.
import type { Dispatcher } from 'undici';
import { Agent, errors as undiciErrors } from '../../shared/undici.ts';
import type { ChunkSink, ChunkSource } from './relay.ts';
import { credentialFor } from './headers.ts';
import type { PodCredential } from '../config/load.ts';
import { resolveSecret } from '../config/secrets.ts';
import type { Pod } from '../types.ts';
import { describeError } from '../../shared/describe-error.ts';

export interface PodTimeouts {
  /** Until the pod's response headers, for a streamed request (they come with the first token). */
  connectMs: number;
  /**
   * Until the response headers of a non-streamed request: model servers send them only with the
   * whole answer, so a long generation must not be cut (and retried elsewhere, wasting the GPU
   * work) by the streamed request's deadline.
   */
  responseMs: number;
  /** Longest silence between two chunks of the body. */
  idleMs: number;
}

/**
 * Keep-alive connection pools, one per pod origin, shared by every request of the agent. The
 * router admits at most `maxConnectionsPerPod` requests to one pod at a time (the pool's
 * at-capacity filter), and this is the same bound: a request never waits inside undici's queue,
 * where no timer runs and the router cannot see it.
 */
export function createPodDispatcher(maxConnectionsPerPod: number): Agent {
  return new Agent({
    keepAliveTimeout: 30_000,
    keepAliveMaxTimeout: 300_000,
    connections: maxConnectionsPerPod,
    pipelining: 1,
  });
}

/** The headers that authenticate the agent to a pod: its most specific configured API key, if any. */
export function podAuthFrom(
  credentials: readonly PodCredential[],
  log: (level: 'warn', message: string) => void,
): (pod: Pick<Pod, 'name' | 'namespace'>) => Record<string, string> {
  return (pod): Record<string, string> => {
    const key = credentialFor(pod, credentials);
    if (!key) return {};
    try {
      return { authorization: `Bearer ${resolveSecret(key)}` };
    } catch (error) {
      // Sent without a key, the pod answers 401, which fails over to another pod and says why.
      log('warn', `pod ${pod.namespace}/${pod.name}: ${(error as Error).message}`);
      return {};
    }
  };
}

/** Error answers are a message, not a payload: more than this is cut off (and the pod is at fault). */
const MAX_ERROR_BODY_BYTES = 256 * 1024;

export type PodAttempt =
  | {
      ok: true;
      status: number;
      contentType: string;
      /** The first body chunk (undefined for an empty body). */
      first: Uint8Array | undefined;
      /** The rest of the body, pushed chunk by chunk as it arrives. */
      rest: ChunkSource;
      /** ms from sending to the first body byte. */
      firstByteMs: number;
      /** Stops the upstream request (the client left). */
      abort: () => void;
    }
  | {
      ok: false;
      /** True when another pod may be tried: nothing reached the client and the pod is at fault. */
      retryable: boolean;
      status?: number;
      /** Upstream body for non-retryable pod answers (e.g. vLLM's 400 for a too-long prompt). */
      body?: Uint8Array;
      contentType?: string;
      error: string;
    };

/** undici's two timeouts in words; anything else as every error is described. */
function describe(error: unknown): string {
  if (error instanceof undiciErrors.HeadersTimeoutError) return 'timed out waiting for response headers';
  if (error instanceof undiciErrors.BodyTimeoutError) return 'timed out waiting for the body';
  return describeError(error);
}

/**
 * One request to a pod on undici's dispatch callbacks: no body stream, no async iterator, no
 * abort-signal plumbing per request. It settles the attempt at the first body byte (or the
 * failure before it), then hands the rest to one sink as it arrives, pausing the pod's socket
 * when the sink is full (the client reads slowly) and until a sink is attached.
 */
class PodExchange implements Dispatcher.DispatchHandler, ChunkSource {
  readonly #settle: (attempt: PodAttempt) => void;
  readonly #clientGone: () => boolean;
  readonly #now: () => number;
  readonly #started: number;
  /** Until response headers; started at send, so time queued for a connection counts too. */
  readonly #headersDeadline: NodeJS.Timeout;
  #settled = false;
  #controller: Dispatcher.DispatchController | undefined;
  /** Why we stopped the request ourselves (deadline, client gone, body too large). */
  #stopped: Error | undefined;
  #status = 0;
  #contentType = 'application/json';
  /** An error answer's body, bounded. */
  #errorBody: Buffer[] | undefined;
  #errorBytes = 0;
  #sink: ChunkSink | undefined;
  /** Chunks (and the end) that arrived after the first byte, before a sink was attached. */
  #held: Buffer[] = [];
  #ended: { error?: Error } | undefined;

  constructor(settle: (attempt: PodAttempt) => void, clientGone: () => boolean, now: () => number, headersMs: number) {
    this.#settle = settle;
    this.#clientGone = clientGone;
    this.#now = now;
    this.#started = now();
    this.#headersDeadline = setTimeout(
      () => this.#stop(new Error(`no response headers within ${headersMs} ms`)),
      headersMs,
    );
  }

  #fail(error: unknown): void {
    const reason = this.#stopped && !this.#clientGone() ? this.#stopped.message : describe(error);
    this.#settleOnce({ ok: false, retryable: !this.#clientGone(), error: reason });
  }

  #settleOnce(attempt: PodAttempt): void {
    if (this.#settled) return;
    this.#settled = true;
    clearTimeout(this.#headersDeadline);
    this.#settle(attempt);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    if (this.#stopped) controller.abort(this.#stopped);
  }

  onResponseStart(_controller: Dispatcher.DispatchController, status: number, headers: Record<string, unknown>): void {
    clearTimeout(this.#headersDeadline);
    this.#status = status;
    const type = headers['content-type'];
    if (type !== undefined) this.#contentType = String(type);
    if (status >= 400) this.#errorBody = [];
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#errorBody) {
      this.#errorBytes += chunk.byteLength;
      if (this.#errorBytes <= MAX_ERROR_BODY_BYTES) this.#errorBody.push(chunk);
      else this.#stop(new Error(`pod answered ${this.#status} with an error body over ${MAX_ERROR_BODY_BYTES} bytes`));
      return;
    }
    if (!this.#settled) return this.#answered(chunk);
    if (!this.#sink) {
      this.#held.push(chunk);
      controller.pause();
    } else if (!this.#sink.data(chunk)) controller.pause();
  }

  onResponseEnd(): void {
    if (this.#errorBody) return this.#errorAnswer(Buffer.concat(this.#errorBody, this.#errorBytes));
    if (!this.#settled) this.#answered(undefined);
    this.#end({});
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    if (!this.#settled) {
      if (this.#errorBody && this.#stopped && !this.#clientGone())
        return this.#settleOnce({ ok: false, retryable: true, status: this.#status, error: this.#stopped.message });
      return this.#fail(error);
    }
    this.#end({ error: this.#stopped ?? error });
  }

  #answered(first: Buffer | undefined): void {
    this.#settleOnce({
      ok: true,
      status: this.#status,
      contentType: this.#contentType,
      first,
      rest: this,
      firstByteMs: this.#now() - this.#started,
      abort: () => this.#stop(new Error('client disconnected')),
    });
  }

  #errorAnswer(bytes: Buffer): void {
    const status = this.#status;
    if (status === 401 || status === 403) {
      // The pod rejected the agent's key (podCredentials), not the client: never pass its 401 on
      // as if the app were at fault; another pod (with the right key) may serve.
      return this.#settleOnce({
        ok: false,
        retryable: true,
        status: 502,
        error: `pod rejected the agent's credentials (HTTP ${status}): check podCredentials`,
      });
    }
    // 429 (queue full) and 5xx are the pod's trouble: another pod may do better.
    const retryable = status === 429 || status >= 500;
    this.#settleOnce({
      ok: false,
      retryable,
      status,
      body: bytes,
      contentType: this.#contentType,
      error: `pod answered ${status}`,
    });
  }

  #end(how: { error?: Error }): void {
    if (this.#sink) this.#sink.end(how.error);
    else this.#ended = how;
  }

  /** Stops the request: before the answer, the attempt fails with `reason` at once (even while queued). */
  #stop(reason: Error): void {
    if (this.#stopped) return;
    this.#stopped = reason;
    if (this.#controller) this.#controller.abort(reason);
    else if (!this.#settled) this.#fail(reason);
  }

  // ChunkSource: the rest of the body, after the first chunk.
  flow(sink: ChunkSink): void {
    this.#sink = sink;
    let more = true;
    for (const chunk of this.#held.splice(0)) more = sink.data(chunk);
    if (this.#ended) return sink.end(this.#ended.error);
    if (more) this.resume();
  }

  resume(): void {
    this.#controller?.resume();
  }

  /** Stops the request (headers deadline, client gone, relay ended); before the answer, it fails at once. */
  abort(reason: Error): void {
    this.#stop(reason);
  }
}

/**
 * POST `body` to `http://address/path`. Resolves once the first body byte is in hand, or with a
 * failure. Never rejects. `headers` are the only request headers besides the defaults: the
 * client's own (its Authorization above all) never reach the pod.
 */
export function sendToPod(
  dispatcher: Dispatcher,
  address: string,
  path: string,
  body: Uint8Array,
  clientSignal: AbortSignal,
  timeouts: PodTimeouts,
  options: {
    /** The request is not streamed: its headers wait for the whole answer (responseMs, not connectMs). */
    wholeAnswer: boolean;
    headers?: Record<string, string>;
    now?: () => number;
  },
): Promise<PodAttempt> {
  const { wholeAnswer, headers = {}, now = performance.now.bind(performance) } = options;
  return new Promise((resolve) => {
    // undici's headersTimeout starts once a connection is free; the exchange's own starts now, so
    // time spent queued for a connection counts too.
    const headersMs = wholeAnswer ? timeouts.responseMs : timeouts.connectMs;
    const onClientGone = () => exchange.abort(new Error('client disconnected'));
    const exchange = new PodExchange(
      (attempt) => {
        clientSignal.removeEventListener('abort', onClientGone);
        resolve(attempt);
      },
      () => clientSignal.aborted,
      now,
      headersMs,
    );
    if (clientSignal.aborted) return onClientGone();
    clientSignal.addEventListener('abort', onClientGone, { once: true });
    // undici reports every failure, a synchronous one too, through onResponseError.
    dispatcher.dispatch(
      {
        origin: `http://${address}`,
        path,
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
        body,
        headersTimeout: headersMs,
        bodyTimeout: timeouts.idleMs,
      },
      exchange,
    );
  });
}
