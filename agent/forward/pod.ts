// One concern: send one request to one pod and hand back its answer, holding the first byte
// back so a failure before it can still be retried on another pod.
import { Agent, request, errors as undiciErrors } from 'undici';
import { readRest } from './relay.ts';
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
      /** The rest of the body, chunk by chunk as it arrives. */
      rest: AsyncIterator<Uint8Array>;
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
 * POST `body` to `http://address/path`. Resolves once the first body byte is in hand, or with a
 * failure. Never rejects. `headers` are the only request headers besides the defaults: the
 * client's own (its Authorization above all) never reach the pod.
 */
export async function sendToPod(
  dispatcher: Agent,
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
  const controller = new AbortController();
  const onClientGone = () => controller.abort(new Error('client disconnected'));
  if (clientSignal.aborted) onClientGone();
  clientSignal.addEventListener('abort', onClientGone, { once: true });
  const started = now();
  // undici's headersTimeout starts once a connection is free; this one starts now, so time spent
  // queued for a connection counts too.
  const headersMs = wholeAnswer ? timeouts.responseMs : timeouts.connectMs;
  const headersDeadline = setTimeout(
    () => controller.abort(new Error(`no response headers within ${headersMs} ms`)),
    headersMs,
  );
  try {
    const response = await request(`http://${address}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
      body,
      signal: controller.signal,
      dispatcher,
      headersTimeout: headersMs,
      bodyTimeout: timeouts.idleMs,
    });
    clearTimeout(headersDeadline);
    const contentType = String(response.headers['content-type'] ?? 'application/json');
    if (response.statusCode >= 400) {
      let bytes: Uint8Array;
      try {
        bytes = await readRest(undefined, response.body[Symbol.asyncIterator](), MAX_ERROR_BODY_BYTES);
      } catch {
        response.body.destroy();
        return {
          ok: false,
          retryable: !clientSignal.aborted,
          status: response.statusCode,
          error: `pod answered ${response.statusCode} with an error body over ${MAX_ERROR_BODY_BYTES} bytes`,
        };
      }
      if (response.statusCode === 401 || response.statusCode === 403) {
        // The pod rejected the agent's key (podCredentials), not the client: never pass its 401 on
        // as if the app were at fault; another pod (with the right key) may serve.
        return {
          ok: false,
          retryable: true,
          status: 502,
          error: `pod rejected the agent's credentials (HTTP ${response.statusCode}): check podCredentials`,
        };
      }
      // 429 (queue full) and 5xx are the pod's trouble: another pod may do better.
      const retryable = response.statusCode === 429 || response.statusCode >= 500;
      return {
        ok: false,
        retryable,
        status: response.statusCode,
        body: bytes,
        contentType,
        error: `pod answered ${response.statusCode}`,
      };
    }
    const iterator = response.body[Symbol.asyncIterator]() as AsyncIterator<Uint8Array>;
    const first = await iterator.next();
    return {
      ok: true,
      status: response.statusCode,
      contentType,
      first: first.done ? undefined : first.value,
      rest: iterator,
      firstByteMs: now() - started,
      abort: () => controller.abort(new Error('client disconnected')),
    };
  } catch (error) {
    const reason =
      controller.signal.aborted && !clientSignal.aborted
        ? (controller.signal.reason as Error).message
        : describe(error);
    return { ok: false, retryable: !clientSignal.aborted, error: reason };
  } finally {
    clearTimeout(headersDeadline);
    clientSignal.removeEventListener('abort', onClientGone);
  }
}
