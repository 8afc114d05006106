// Relays an upstream body to the client chunk by chunk, as it arrives. A failure after the first
// byte can no longer change the status, so a stream ends with an OpenAI-style error event and
// `data: [DONE]` (what vLLM itself does); a client that leaves aborts the upstream request.
import { SSE_DONE, sseErrorFrame } from '../../shared/openai/errors.ts';

export interface RelayHooks {
  /** Called once when the relay ends: ok = the upstream body completed. */
  onEnd(outcome: { ok: boolean; error?: string; bytes: number }): void;
  /** What ends an event stream that broke (default: an OpenAI error event, then `data: [DONE]`). */
  brokenStreamEnd?: (message: string) => string;
}

const chatStreamEnd = (message: string) => sseErrorFrame(502, message, { code: 'upstream_stream_error' }) + SSE_DONE;

export function relayStream(
  first: Uint8Array | undefined,
  rest: AsyncIterator<Uint8Array>,
  abortUpstream: () => void,
  isEventStream: boolean,
  hooks: RelayHooks,
): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  let bytes = 0;
  let ended = false;
  const end = (ok: boolean, error?: string) => {
    if (ended) return;
    ended = true;
    hooks.onEnd({ ok, error, bytes });
  };
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        if (first) {
          bytes += first.byteLength;
          controller.enqueue(first);
        }
      },
      async pull(controller) {
        try {
          const next = await rest.next();
          if (next.done) {
            end(true);
            controller.close();
            return;
          }
          bytes += next.value.byteLength;
          controller.enqueue(next.value);
        } catch (error) {
          const message = `upstream failed mid-stream: ${(error as Error).message ?? error}`;
          end(false, message);
          if (isEventStream) {
            controller.enqueue(encoder.encode((hooks.brokenStreamEnd ?? chatStreamEnd)(message)));
            controller.close();
          } else {
            controller.error(error);
          }
        }
      },
      cancel() {
        end(false, 'client disconnected');
        abortUpstream();
      },
    },
    // One chunk of read-ahead at most: a slow client slows the pod's socket, not our memory.
    { highWaterMark: 1 },
  );
}

/** Reads the rest of a (non-stream) body into one buffer. */
export async function readRest(
  first: Uint8Array | undefined,
  rest: AsyncIterator<Uint8Array>,
  limitBytes: number,
): Promise<Uint8Array> {
  const chunks: Uint8Array[] = first ? [first] : [];
  let total = first?.byteLength ?? 0;
  for (let next = await rest.next(); !next.done; next = await rest.next()) {
    total += next.value.byteLength;
    if (total > limitBytes) throw new Error(`upstream body larger than ${limitBytes} bytes`);
    chunks.push(next.value);
  }
  return Buffer.concat(chunks);
}

/**
 * An event stream that ends properly when `signal` fires (the agent's drain deadline): an error
 * event and `data: [DONE]` go out, then the stream closes and its source is cancelled (which
 * aborts the upstream request). Without this, a stream still running at the deadline would
 * just stop at the socket and the client could not tell a cut from a finished answer.
 */
export function endOnSignal(
  body: ReadableStream<Uint8Array>,
  signal: AbortSignal,
  message: string,
): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  let ended = false;
  let stop: () => void = () => {};
  const release = () => {
    ended = true;
    signal.removeEventListener('abort', stop);
  };
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        stop = () => {
          if (ended) return;
          release();
          // A blank line first: whatever partial event was in flight is closed off, not merged.
          controller.enqueue(
            new TextEncoder().encode(`\n\n${sseErrorFrame(503, message, { code: 'agent_shutting_down' })}${SSE_DONE}`),
          );
          controller.close();
          void reader.cancel().catch(() => {});
        };
        if (signal.aborted) stop();
        else signal.addEventListener('abort', stop, { once: true });
      },
      async pull(controller) {
        let next: ReadableStreamReadResult<Uint8Array>;
        try {
          next = await reader.read();
        } catch (error) {
          if (ended) return;
          release();
          controller.error(error);
          return;
        }
        if (ended) return; // stopped while reading: the closing events are already out
        if (next.done) {
          release();
          controller.close();
        } else controller.enqueue(next.value);
      },
      cancel(reason) {
        release();
        return reader.cancel(reason);
      },
    },
    { highWaterMark: 1 },
  );
}
