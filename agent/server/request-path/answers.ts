// Answers as the request path gives them (no web Response on the hot path): a status, headers, and
// either whole bytes or an upstream body relayed as it arrives; written straight to the socket.
import type { ApiResponse } from '../exchange.ts';
import { errorBody, type ErrorOptions } from '../../../shared/openai/errors.ts';
import {
  relayTo,
  type ChunkSource,
  type RelayOutcome,
  type RelayStop,
  type UpstreamBody,
} from '../../forward/relay.ts';
import type { PodAttempt } from '../../forward/pod.ts';
import type { EffectivePolicy } from '../../types.ts';

export interface Answer {
  status: number;
  headers: Record<string, string>;
  /** A whole body (sent with its length), or none. */
  body?: Uint8Array | string;
  /** An upstream body relayed chunk by chunk (instead of `body`). */
  stream?: UpstreamBody;
  /**
   * Bookkeeping the client's answer does not wait for (the pod's learning, TTFT metrics; for a
   * whole answer the pod's slot too): the recorder runs it once the answer's bytes are written
   * (a whole answer's) or queued (a stream's first ones). Must run exactly once.
   */
  settle?: () => void;
}

/** An OpenAI-shaped error, marked `x-kinference-route: rejected` as docs/api.md promises. */
export function errorAnswer(status: number, message: string, opts: ErrorOptions = {}): Answer {
  return {
    status,
    headers: { 'content-type': 'application/json', 'x-kinference-route': 'rejected', ...opts.headers },
    body: JSON.stringify(errorBody(status, message, opts)),
  };
}

/** A JSON answer of the agent's own. */
export function jsonAnswer(status: number, value: unknown, headers: Record<string, string> = {}): Answer {
  return { status, headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(value) };
}

/** A pod's streamed answer, relayed to the client as it arrives (`relay` says how it ends). */
export function podStreamAnswer(
  attempt: Extract<PodAttempt, { ok: true }>,
  headers: Record<string, string>,
  relay: Pick<UpstreamBody, 'brokenEnd' | 'onEnd'>,
): Answer {
  return {
    status: attempt.status,
    headers: { 'content-type': attempt.contentType, 'cache-control': 'no-cache', ...headers },
    stream: {
      first: attempt.first,
      source: attempt.rest,
      eventStream: attempt.contentType.includes('event-stream'),
      ...relay,
    },
  };
}

/**
 * A provider's web Response as an answer: its body relayed as it arrives (the providers' own
 * relays already frame events and end broken streams properly; here they are only moved on).
 */
export function answerOfResponse(response: Response): Answer {
  const headers: Record<string, string> = {};
  // The length and framing are the socket's business here, not the provider's.
  response.headers.forEach((value, name) => {
    if (name !== 'content-length' && name !== 'transfer-encoding') headers[name] = value;
  });
  if (!response.body) return { status: response.status, headers };
  return {
    status: response.status,
    headers,
    stream: {
      first: undefined,
      source: webStreamSource(response.body),
      eventStream: headers['content-type']?.includes('event-stream') ?? false,
    },
  };
}

/** A web ReadableStream as a chunk source: read in a loop, waiting for `resume` when the sink is full. */
function webStreamSource(body: ReadableStream<Uint8Array>): ChunkSource {
  const reader = body.getReader();
  let resumed: (() => void) | undefined;
  return {
    flow(sink) {
      void (async () => {
        try {
          for (;;) {
            const { done, value } = await reader.read();
            if (done) return sink.end();
            if (!sink.data(value)) await new Promise<void>((resolve) => (resumed = resolve));
          }
        } catch (error) {
          sink.end(error as Error);
        }
      })();
    },
    resume() {
      resumed?.();
      resumed = undefined;
    },
    abort(reason) {
      resumed?.();
      void reader.cancel(reason).catch(() => {});
    },
  };
}

/** Writes the answer to the socket; resolves when it is sent (ok) or abandoned/broken. */
export async function writeAnswer(res: ApiResponse, answer: Answer, stop?: RelayStop): Promise<RelayOutcome> {
  if (answer.stream) {
    res.writeHead(answer.status, answer.headers);
    return relayTo(res, answer.stream, stop);
  }
  const body = answer.body ?? '';
  const length = typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength;
  answer.headers['content-length'] = String(length);
  res.writeHead(answer.status, answer.headers);
  // Handed to the socket in one write; a client gone by now is the socket's concern, not the answer's.
  res.end(body);
  return { ok: !res.destroyed, bytes: length };
}

/** 502 after every pod tried failed before its first byte; says how the last one failed. */
/** 502: every pod the request could use failed before answering; `tried` names them, in order. */
export function podsFailed(attempts: number, lastError?: string, tried?: readonly string[]): Answer {
  const names = tried?.length ? `: ${tried.join(', ')}` : '';
  const last = lastError ? `; last: ${lastError}` : '';
  return errorAnswer(
    502,
    `the model server failed before answering (tried ${attempts} pod${attempts > 1 ? 's' : ''}${names}${last})`,
    { code: 'upstream_failed' },
  );
}

export function retryAfterSeconds(policy: EffectivePolicy): string {
  return String(Math.max(1, Math.ceil(policy.waitMaxMs / 1000)));
}
