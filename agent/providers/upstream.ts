// The one place provider adapters touch the network: a keep-alive undici pool per provider, a
// deadline that covers connect + response headers, and errors that say what happened without
// ever carrying a request header (where the credentials are).
import { Agent, request, type Dispatcher } from 'undici';
import type { Provider } from './types.ts';

/** Bounds on what a provider may send back (limits.maxUpstreamBodyBytes, limits.providerIdleTimeout). */
export interface ProviderLimits {
  /** Largest JSON answer, and largest single SSE event; past it the answer is a 502. */
  maxBodyBytes: number;
  /** Longest silence inside an answer body (own dispatcher only). */
  idleTimeoutMs: number;
}

export const DEFAULT_PROVIDER_LIMITS: ProviderLimits = { maxBodyBytes: 32 * 1024 * 1024, idleTimeoutMs: 60_000 };

export interface ProviderDeps {
  /** Shared or test dispatcher; by default each provider gets its own keep-alive pool. */
  dispatcher?: Dispatcher;
  limits?: Partial<ProviderLimits>;
  /** Where `{env: …}` secrets are read (tests inject their own). */
  env?: NodeJS.ProcessEnv;
}

export interface ClosableProvider extends Provider {
  /** Closes the provider's own connection pool (not an injected dispatcher). */
  close(): Promise<void>;
}

export type FailureReason = 'timeout' | 'connect' | 'aborted' | 'config' | 'protocol';

/** A provider call that produced no answer (rejects `Provider.send`); safe to log and show. */
export class ProviderError extends Error {
  readonly provider: string;
  readonly reason: FailureReason;
  constructor(provider: string, reason: FailureReason, message: string) {
    super(`provider ${provider}: ${message}`);
    this.name = 'ProviderError';
    this.provider = provider;
    this.reason = reason;
  }
}

/** Keep-alive pool for one provider. Hosted APIs sit behind TLS, so reusing sockets is most of
 *  the latency win; idle sockets are kept well below the usual 60 s load-balancer idle cut. */
/**
 * The provider's dispatcher: the injected one (not ours to close), or a keep-alive pool of its own
 * that `close` closes with the provider.
 */
export function providerDispatcher(
  deps: ProviderDeps,
  timeoutMs: number,
  idleTimeoutMs: number,
): { dispatcher: Dispatcher; close: () => Promise<void> } {
  if (deps.dispatcher) return { dispatcher: deps.dispatcher, close: async () => {} };
  const own = createDispatcher(timeoutMs, idleTimeoutMs);
  return { dispatcher: own, close: () => own.close() };
}

function createDispatcher(timeoutMs: number, idleTimeoutMs = DEFAULT_PROVIDER_LIMITS.idleTimeoutMs): Dispatcher {
  return new Agent({
    keepAliveTimeout: 30_000,
    keepAliveMaxTimeout: 55_000,
    connect: { timeout: timeoutMs },
    // Our own deadline (below) covers connect + headers; undici's would fire on top of it.
    headersTimeout: 0,
    // A stream may legitimately pause (a reasoning model thinking), but not forever: headers
    // followed by silence must not hold a client (and a socket) for minutes.
    bodyTimeout: idleTimeoutMs,
  });
}

export interface UpstreamRequest {
  provider: string;
  url: URL;
  headers: Record<string, string>;
  body: string;
  signal: AbortSignal;
  timeoutMs: number;
  dispatcher: Dispatcher;
}

export interface UpstreamResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Dispatcher.ResponseData['body'];
  /** Stops the connect/headers deadline. Called by the adapter once it has what it counts as a
   *  first answer (headers; for Bedrock streams, the first event). */
  settle(): void;
  /** Whether the deadline has fired (the body then fails with an abort). */
  timedOut(): boolean;
}

/**
 * POSTs and resolves at response headers. Rejects with a ProviderError on connect failure,
 * deadline, or the caller's abort.
 */
export async function postUpstream(req: UpstreamRequest): Promise<UpstreamResponse> {
  const deadline = new AbortController();
  let fired = false;
  const timer = setTimeout(() => {
    fired = true;
    deadline.abort();
  }, req.timeoutMs);
  const settle = () => clearTimeout(timer);
  try {
    const res = await request(req.url, {
      method: 'POST',
      headers: req.headers,
      body: req.body,
      signal: AbortSignal.any([req.signal, deadline.signal]),
      dispatcher: req.dispatcher,
    });
    return {
      status: res.statusCode,
      headers: res.headers,
      body: res.body,
      settle,
      timedOut: () => fired,
    };
  } catch (err) {
    settle();
    throw failure(req.provider, err, { timedOut: fired, aborted: req.signal.aborted, timeoutMs: req.timeoutMs });
  }
}

/** Classifies a transport error into a ProviderError whose message holds no request data. */
export function failure(
  provider: string,
  err: unknown,
  ctx: { timedOut: boolean; aborted: boolean; timeoutMs: number; idleTimeoutMs?: number },
): ProviderError {
  if (ctx.aborted) return new ProviderError(provider, 'aborted', 'request aborted by the caller');
  if (ctx.timedOut) return new ProviderError(provider, 'timeout', `no answer within ${ctx.timeoutMs} ms`);
  if (err instanceof ProviderError) return err;
  const code = errorCode(err);
  if (code === 'UND_ERR_BODY_TIMEOUT')
    return new ProviderError(
      provider,
      'timeout',
      `answer body silent for ${ctx.idleTimeoutMs ?? DEFAULT_PROVIDER_LIMITS.idleTimeoutMs} ms`,
    );
  if (code !== undefined && /^(E[A-Z_]+|UND_ERR_CONNECT_TIMEOUT|UND_ERR_SOCKET)$/.test(code)) {
    return new ProviderError(provider, 'connect', `connection failed (${code})`);
  }
  return new ProviderError(provider, 'protocol', `request failed${code ? ` (${code})` : ''}`);
}

function errorCode(err: unknown): string | undefined {
  let e: unknown = err;
  for (let depth = 0; depth < 4 && e && typeof e === 'object'; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

/** Reads at most `limit` bytes of a body as text (error bodies: we only need the message). */
export async function readText(
  body: AsyncIterable<Uint8Array> & { destroy?: () => void },
  limit = 64 * 1024,
): Promise<string> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    parts.push(Buffer.from(chunk));
    size += chunk.byteLength;
    if (size >= limit) {
      body.destroy?.();
      break;
    }
  }
  return Buffer.concat(parts).subarray(0, limit).toString('utf8');
}

/** A whole answer body as text; past `limit` bytes the socket is dropped and the call fails. */
export async function readBounded(
  body: AsyncIterable<Uint8Array> & { destroy?: () => void },
  limit: number,
  provider: string,
): Promise<string> {
  const parts: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.byteLength;
    if (size > limit) {
      body.destroy?.();
      throw new ProviderError(provider, 'protocol', `answer larger than ${limit} bytes`);
    }
    parts.push(chunk);
  }
  return Buffer.concat(parts, size).toString('utf8');
}

export function providerLimits(deps: ProviderDeps): ProviderLimits {
  return { ...DEFAULT_PROVIDER_LIMITS, ...deps.limits };
}

/** Removes every secret value from text that came from upstream before anyone sees it. */
export function redact(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const secret of secrets) {
    if (secret.length >= 4) out = out.split(secret).join('[redacted]');
  }
  return out;
}

export function header(headers: UpstreamResponse['headers'], name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

export const SSE_HEADERS: Record<string, string> = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
};

export const JSON_HEADERS: Record<string, string> = { 'content-type': 'application/json' };

/** Statuses that say the provider (or our account with it) is the problem, not the request. */
export function isProviderFault(status: number): boolean {
  return status >= 500 || status === 429 || status === 408 || status === 401 || status === 403 || status === 404;
}
