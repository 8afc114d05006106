// The wire under the informers: list (paged) and watch, authenticated by the KubeConfig. The
// informer logic (cache, 410 → relist, resume from resourceVersion) stays client-node's ListWatch;
// this file replaces only its Watch transport, because with client-node 2.0's Watch (checked
// against the stand-in API server):
//   - watches never ask for bookmarks or a server-side timeout, and abort after a fixed 30 s of
//     silence (a private setting);
//   - stop() reaches ListWatch's error listeners as an AbortError;
//   - a stop() that lands during ListWatch's reconnect delay still starts a new watch afterwards.
// ResumingWatch asks for bookmarks and a jittered timeoutSeconds, has its own connect and idle
// timeouts, never calls back for a stop the caller asked for, and after close() starts nothing.
// It also returns its controller at once and connects on the next turn, so a fast failure cannot
// re-enter ListWatch before ListWatch has stored the request.
import { setTimeout as sleep } from 'node:timers/promises';
import { HttpMethod, RequestContext, Watch } from '@kubernetes/client-node';
import type { KubeConfig, KubernetesListObject, KubernetesObject } from '@kubernetes/client-node';
import { fetch } from 'undici';
import type { Dispatcher, Response } from 'undici';
import { describeError } from '../../shared/describe-error.ts';

/** An error answered by the API server (or a watch ERROR event); `statusCode` is what ListWatch reads. */
export class KubeApiError extends Error {
  statusCode: number;
  reason: string | undefined;
  constructor(message: string, statusCode: number, reason?: string) {
    super(message);
    this.name = 'KubeApiError';
    this.statusCode = statusCode;
    this.reason = reason;
  }
}

interface Status {
  code?: number;
  reason?: string;
  message?: string;
}

function statusError(what: string, status: Status | undefined, httpStatus: number): KubeApiError {
  const code = typeof status?.code === 'number' ? status.code : httpStatus;
  const detail = status?.message ? `: ${status.message}` : status?.reason ? `: ${status.reason}` : '';
  return new KubeApiError(`${what}: ${code}${detail}`, code, status?.reason);
}

async function responseError(what: string, response: Response): Promise<KubeApiError> {
  let status: Status | undefined;
  try {
    const text = await response.text();
    status = JSON.parse(text) as Status;
  } catch {
    status = { message: response.statusText };
  }
  return statusError(what, { ...status, code: response.status }, response.status);
}

async function authorize(
  kc: KubeConfig,
  url: URL,
): Promise<{ headers: Record<string, string>; dispatcher?: Dispatcher }> {
  const ctx = new RequestContext(url.toString(), HttpMethod.GET);
  await kc.applySecurityAuthentication(ctx);
  return { headers: { ...ctx.getHeaders(), accept: 'application/json' }, dispatcher: ctx.getDispatcher() };
}

function apiUrl(kc: KubeConfig, path: string, query: Record<string, string | undefined>): URL {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('kubeconfig has no current cluster');
  const url = new URL(cluster.server.replace(/\/+$/, '') + path);
  for (const [key, value] of Object.entries(query)) if (value !== undefined) url.searchParams.set(key, value);
  return url;
}

export interface Selectors {
  labelSelector?: string;
  fieldSelector?: string;
}

export interface ListOptions {
  /** Items per page (`limit`); the API server may ignore it. */
  pageSize: number;
  /** Per page: a list that stalls would otherwise stall its informer forever. */
  timeoutMs: number;
  /**
   * The newest resourceVersion already seen, if any. Lists are served from the API server's watch
   * cache (`resourceVersion=0`, or `resourceVersionMatch=NotOlderThan` this version on a relist)
   * instead of a quorum read from etcd: a thousand agents relisting after an API server restart
   * must not each scan every pod in etcd. The watch that follows catches up from the list's version.
   */
  notOlderThan?: string;
  /** Keeps only what the agent reads of each item (memory: the pods informer covers the cluster). */
  slim?: (item: KubernetesObject) => KubernetesObject;
}

/** Every object at `path`, following `continue` tokens; the list's resourceVersion is the first page's. */
export async function listObjects<T extends KubernetesObject>(
  kc: KubeConfig,
  path: string,
  selectors: Selectors,
  opts: ListOptions,
): Promise<KubernetesListObject<T>> {
  const items: T[] = [];
  let resourceVersion: string | undefined;
  let token: string | undefined;
  const freshness = opts.notOlderThan
    ? { resourceVersion: opts.notOlderThan, resourceVersionMatch: 'NotOlderThan' }
    : { resourceVersion: '0' };
  do {
    // A continue token carries the snapshot; resourceVersion must not be sent with it.
    const url = apiUrl(kc, path, {
      ...selectors,
      limit: String(opts.pageSize),
      ...(token ? { continue: token } : freshness),
    });
    let page: KubernetesListObject<T>;
    try {
      const { headers, dispatcher } = await authorize(kc, url);
      const response = await fetch(url, { headers, dispatcher, signal: AbortSignal.timeout(opts.timeoutMs) });
      if (response.status !== 200) throw await responseError(`list ${path}`, response);
      page = (await response.json()) as KubernetesListObject<T>;
    } catch (err) {
      if (err instanceof KubeApiError) throw err;
      throw new Error(`list ${path}: ${describeError(err)}`, { cause: err });
    }
    for (const item of page.items ?? []) items.push((opts.slim ? opts.slim(item) : item) as T);
    resourceVersion ??= page.metadata?.resourceVersion;
    token = page.metadata?._continue ?? (page.metadata as { continue?: string } | undefined)?.continue;
  } while (token);
  return { metadata: { resourceVersion }, items };
}

export interface WatchOptions {
  /** Silence (no event, no bookmark) after which a connected watch is presumed stalled and resumed. */
  idleTimeoutMs: number;
  /** No response headers within this: the API server is not answering. */
  connectTimeoutMs: number;
  /** Server-side `timeoutSeconds` for each watch request (jitter it: agents reconnect at different times). */
  timeoutSeconds: () => number;
  /** A watch got its 200: the source is connected again. */
  onEstablished?: () => void;
  /** A failure inside ListWatch's own handler (it is async and nobody awaits it). */
  onInternalError?: (err: unknown) => void;
  /** Applied to every watched object before the informer caches it. */
  slim?: (item: KubernetesObject) => KubernetesObject;
}

type WatchCallback = (phase: string, apiObj: unknown, watchObj?: unknown) => void;
type DoneCallback = (err: unknown) => void;

function timeoutError(): DOMException {
  // ListWatch resumes at once from its resourceVersion on a TimeoutError (no relist, no backoff).
  return new DOMException('watch was silent too long', 'TimeoutError');
}

/** A Watch for one ListWatch. See the file comment for why it exists. */
export class ResumingWatch extends Watch {
  readonly #opts: WatchOptions;
  readonly #active = new Set<AbortController>();
  #closed = false;
  #lastLastedMs = 0;

  constructor(kc: KubeConfig, opts: WatchOptions) {
    super(kc);
    this.#opts = opts;
  }

  /** The resourceVersion of the last event (bookmarks included) any watch delivered. */
  lastResourceVersion: string | undefined;

  /** How long the last watch stayed connected (0: it never connected). */
  get lastWatchLastedMs(): number {
    return this.#lastLastedMs;
  }

  /** Abort every watch and start no more. */
  close(): void {
    this.#closed = true;
    for (const controller of this.#active) controller.abort();
    this.#active.clear();
  }

  override async watch(
    path: string,
    queryParams: Record<string, string | number | boolean | undefined>,
    callback: WatchCallback,
    done: DoneCallback,
  ): Promise<AbortController> {
    const controller = new AbortController();
    if (this.#closed) {
      controller.abort();
      return controller;
    }
    this.#active.add(controller);
    // Start after ListWatch has stored this controller, so an immediate failure cannot overtake it.
    setImmediate(() => {
      this.#run(controller, path, queryParams, callback, done).catch((e: unknown) => this.#opts.onInternalError?.(e));
    });
    return controller;
  }

  /** Waits `ms` unless closed meanwhile; never rejects (ListWatch does not await its handler safely). */
  async pause(ms: number): Promise<void> {
    if (this.#closed || ms <= 0) return;
    const controller = new AbortController();
    this.#active.add(controller);
    await sleep(ms, undefined, { signal: controller.signal }).catch(() => undefined);
    this.#active.delete(controller);
  }

  /** One line of a watch stream, handed to the callback; returns why the watch must end, if it must. */
  #deliver(line: string, path: string, callback: WatchCallback): Error | undefined {
    let event: { type?: string; object?: Status };
    try {
      event = JSON.parse(line) as typeof event;
    } catch {
      // Skipping a line would skip an event for good; resuming from the last resourceVersion replays it.
      return new Error(`watch ${path}: malformed event`);
    }
    if (typeof event.type !== 'string') return undefined;
    const rv = (event.object as { metadata?: { resourceVersion?: string } } | undefined)?.metadata?.resourceVersion;
    if (event.type !== 'ERROR' && rv) this.lastResourceVersion = rv;
    try {
      // ListWatch's handler is async and its promise is not awaited by anyone else.
      const slim =
        this.#opts.slim &&
        event.object &&
        (event.type === 'ADDED' || event.type === 'MODIFIED' || event.type === 'DELETED');
      Promise.resolve(
        callback(
          event.type,
          slim ? this.#opts.slim!(event.object as KubernetesObject) : event.object,
          event,
        ) as unknown,
      ).catch((e: unknown) => this.#opts.onInternalError?.(e));
    } catch (e) {
      this.#opts.onInternalError?.(e);
    }
    return event.type === 'ERROR' ? statusError(`watch ${path}`, event.object, 500) : undefined;
  }

  async #run(
    controller: AbortController,
    path: string,
    queryParams: Record<string, string | number | boolean | undefined>,
    callback: WatchCallback,
    done: DoneCallback,
  ): Promise<void> {
    let connectedAt = -1;
    let finished = false;
    let timer: NodeJS.Timeout | undefined;

    const finish = (err: unknown, callerStopped = false): void => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      this.#active.delete(controller);
      this.#lastLastedMs = connectedAt < 0 ? 0 : performance.now() - connectedAt;
      if (!controller.signal.aborted) controller.abort();
      if (callerStopped || this.#closed) return;
      try {
        Promise.resolve(done(err) as unknown).catch((e: unknown) => this.#opts.onInternalError?.(e));
      } catch (e) {
        this.#opts.onInternalError?.(e);
      }
    };
    controller.signal.addEventListener('abort', () => finish(null, true), { once: true });
    if (controller.signal.aborted) return finish(null, true);

    const arm = (ms: number, fail: () => unknown): void => {
      clearTimeout(timer);
      timer = setTimeout(() => finish(fail()), ms);
    };
    arm(
      this.#opts.connectTimeoutMs,
      () => new KubeApiError(`watch ${path}: no response within ${this.#opts.connectTimeoutMs} ms`, 504),
    );

    const query: Record<string, string | undefined> = { watch: 'true', allowWatchBookmarks: 'true' };
    for (const [key, value] of Object.entries(queryParams)) if (value !== undefined) query[key] = String(value);
    query.timeoutSeconds ??= String(Math.max(1, Math.round(this.#opts.timeoutSeconds())));

    let response: Response;
    try {
      const url = apiUrl(this.config, path, query);
      const { headers, dispatcher } = await authorize(this.config, url);
      if (finished) return;
      response = await fetch(url, { headers, dispatcher, signal: controller.signal });
    } catch (err) {
      return finish(
        err instanceof Error && err.name === 'AbortError'
          ? null
          : new Error(`watch ${path}: ${describeError(err)}`, { cause: err }),
      );
    }
    if (finished) {
      await response.body?.cancel().catch(() => undefined);
      return;
    }
    if (response.status !== 200 || !response.body) {
      return finish(await responseError(`watch ${path}`, response));
    }
    connectedAt = performance.now();
    this.#opts.onEstablished?.();
    const idle = (): void => arm(this.#opts.idleTimeoutMs, timeoutError);
    idle();

    const decoder = new TextDecoder();
    let buffer = '';
    try {
      for await (const chunk of response.body) {
        if (finished) return;
        idle();
        buffer += decoder.decode(chunk, { stream: true });
        let newline: number;
        while ((newline = buffer.indexOf('\n')) >= 0) {
          const line = buffer.slice(0, newline).trim();
          buffer = buffer.slice(newline + 1);
          if (line === '') continue;
          const stop = this.#deliver(line, path, callback);
          if (stop !== undefined) return finish(stop);
        }
      }
      finish(null);
    } catch (err) {
      finish(finished ? null : new Error(`watch ${path}: ${describeError(err)}`, { cause: err }));
    }
  }
}
