// One concern: send one request to one pod and hand back its answer, holding the first byte
// back so a failure before it can still be retried on another pod.
import { PodClient, type PodRequest, type PodResponseHandler } from './pod-client.ts';
import type { ChunkSink, ChunkSource } from './relay.ts';
import { credentialFor } from './headers.ts';
import type { PodCredential } from '../config/load.ts';
import { resolveSecret } from '../config/secrets.ts';
import type { Pod } from '../types.ts';
import { describeError } from '../../shared/describe-error.ts';
import { Deadlines, type Deadline } from './deadlines.ts';

/**
 * Whether the client of a request left, and a call when it does: an AbortSignal fits, and so does
 * the API listener's request (agent/server/request-path/client-request.ts), which needs no EventTarget.
 */
export interface ClientPresence {
  readonly aborted: boolean;
  addEventListener(type: 'abort', listener: () => void): void;
  removeEventListener(type: 'abort', listener: () => void): void;
}

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
 * Keep-alive connections to pods, shared by every request of the agent. The router admits at most
 * `maxConnectionsPerPod` requests to one pod at a time (the pool's at-capacity filter), and this
 * is the same bound: a request never waits in the client's queue, where the router cannot see it.
 */
export function createPodDispatcher(maxConnectionsPerPod: number): PodClient {
  return new PodClient({ maxConnectionsPerPod, keepAliveMs: 30_000, maxKeepAliveMs: 300_000 });
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

/** A character outside a field value (RFC 9110 5.5: visible ASCII, space, tab, obs-text). */
const NOT_FIELD_VALUE = /[^\t\x20-\x7e\x80-\xff]/;

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

/**
 * One request to a pod on the pod client (pod-client.ts, undici). It settles the attempt at the
 * first body byte (or the failure before it), then hands the rest to one sink as it arrives,
 * pausing the pod's socket when the sink is full (the client reads slowly) and until a sink is
 * attached.
 */
class PodExchange implements PodResponseHandler, ChunkSource {
  readonly #settle: (attempt: PodAttempt) => void;
  readonly #signal: ClientPresence;
  readonly #now: () => number;
  readonly #started: number;
  /** Until response headers; started at send, so time queued for a connection counts too. */
  readonly #headersDeadline: Deadline<PodExchange>;
  readonly #headersMs: number;
  #settled = false;
  #request: PodRequest | undefined;
  /** Why we stopped the request ourselves (deadline, client gone, body too large). */
  #stopped: Error | undefined;
  #status = 0;
  #contentType = 'application/json';
  /** An error answer's body, bounded. */
  #errorBody: Buffer[] | undefined;
  #errorBytes = 0;
  #sink: ChunkSink | undefined;
  /** Chunks (and the end) that arrived after the first byte, before a sink was attached. */
  #held: Buffer[] | undefined;
  #ended: { error?: Error } | undefined;

  constructor(settle: (attempt: PodAttempt) => void, signal: ClientPresence, now: () => number, headersMs: number) {
    this.#settle = settle;
    this.#signal = signal;
    this.#now = now;
    this.#started = now();
    this.#headersMs = headersMs;
    this.#headersDeadline = headersDeadlines(headersMs).add(this);
  }

  start(request: PodRequest): void {
    this.#request = request;
  }

  headersDeadline(): void {
    this.#stop(new Error(`no response headers within ${this.#headersMs} ms`));
  }

  #fail(error: Error): void {
    const clientGone = this.#signal.aborted;
    const reason = this.#stopped && !clientGone ? this.#stopped.message : describeError(error);
    this.#settleOnce({ ok: false, retryable: !clientGone, error: reason });
  }

  #settleOnce(attempt: PodAttempt): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#headersDeadline.clear();
    this.#settle(attempt);
  }

  head(status: number, contentType: string | undefined): void {
    this.#headersDeadline.clear();
    // The content type goes on to the client's answer head; one that could not be written there
    // is the pod's malformed answer: a failure before the first byte, retried elsewhere.
    if (contentType !== undefined && NOT_FIELD_VALUE.test(contentType))
      return this.#stop(new Error(`pod answered a malformed content-type: ${JSON.stringify(contentType)}`));
    this.#status = status;
    if (contentType !== undefined) this.#contentType = contentType;
    if (status >= 400) this.#errorBody = [];
  }

  data(chunk: Buffer): boolean {
    if (this.#errorBody) {
      this.#errorBytes += chunk.byteLength;
      if (this.#errorBytes <= MAX_ERROR_BODY_BYTES) this.#errorBody.push(chunk);
      else {
        const reason = new Error(`pod answered ${this.#status} with an error body over ${MAX_ERROR_BODY_BYTES} bytes`);
        if (!this.#signal.aborted)
          this.#settleOnce({ ok: false, retryable: true, status: this.#status, error: reason.message });
        this.#stop(reason);
      }
      return true;
    }
    if (!this.#settled) {
      this.#answered(chunk);
      return true;
    }
    if (this.#sink) return this.#sink.data(chunk);
    (this.#held ??= []).push(chunk);
    return false;
  }

  end(): void {
    if (this.#errorBody) return this.#errorAnswer(Buffer.concat(this.#errorBody, this.#errorBytes));
    if (!this.#settled) this.#answered(undefined);
    this.#end({});
  }

  error(error: Error): void {
    if (!this.#settled) return this.#fail(error);
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

  /** Stops the request; before the answer, the attempt fails with `reason` at once; after it, a flowing sink ends with it. */
  #stop(reason: Error): void {
    if (this.#stopped) return;
    this.#stopped = reason;
    this.#request?.abort();
    if (!this.#settled) this.#fail(reason);
    else if (!this.#ended) this.#end({ error: reason });
  }

  // ChunkSource: the rest of the body, after the first chunk.
  flow(sink: ChunkSink): void {
    this.#sink = sink;
    let more = true;
    if (this.#held) for (const chunk of this.#held.splice(0)) more = sink.data(chunk);
    if (this.#ended) return sink.end(this.#ended.error);
    if (more) this.resume();
  }

  resume(): void {
    this.#request?.resume();
  }

  /** Stops the request (client gone, relay ended, body too large); before the answer, it fails at once. */
  abort(reason: Error): void {
    this.#stop(reason);
  }
}

/** One list per headers timeout in use (a streamed and a whole-answer one, as configured). */
const headersLists = new Map<number, Deadlines<PodExchange>>();

function headersDeadlines(ms: number): Deadlines<PodExchange> {
  let list = headersLists.get(ms);
  if (list === undefined) {
    list = new Deadlines(ms, onHeadersDeadline);
    headersLists.set(ms, list);
  }
  return list;
}

function onHeadersDeadline(exchange: PodExchange): void {
  exchange.headersDeadline();
}

/**
 * POST `body` to `http://address/path`. Resolves once the first body byte is in hand, or with a
 * failure. Never rejects. `headers` are the only request headers besides the defaults: the
 * client's own (its Authorization above all) never reach the pod.
 */
export function sendToPod(
  client: PodClient,
  address: string,
  path: string,
  body: Uint8Array,
  clientSignal: ClientPresence,
  timeouts: PodTimeouts,
  options: {
    /** The request is not streamed: its headers wait for the whole answer (responseMs, not connectMs). */
    wholeAnswer: boolean;
    headers?: Record<string, string>;
    now?: () => number;
  },
): Promise<PodAttempt> {
  const { wholeAnswer, headers, now = performanceNow } = options;
  return new Promise((resolve) => {
    const headersMs = wholeAnswer ? timeouts.responseMs : timeouts.connectMs;
    const onClientGone = () => exchange.abort(new Error('client disconnected'));
    const exchange = new PodExchange(
      (attempt) => {
        clientSignal.removeEventListener('abort', onClientGone);
        resolve(attempt);
      },
      clientSignal,
      now,
      headersMs,
    );
    if (clientSignal.aborted) return onClientGone();
    clientSignal.addEventListener('abort', onClientGone);
    const sent: Record<string, string> = { 'content-type': 'application/json', accept: ACCEPT };
    if (headers) for (const name in headers) sent[name] = headers[name];
    exchange.start(client.post(address, path, sent, body, exchange, timeouts.idleMs));
  });
}

const ACCEPT = 'application/json, text/event-stream';
const performanceNow = () => performance.now();
