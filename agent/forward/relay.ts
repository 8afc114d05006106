// Relays an upstream body to the client's socket chunk by chunk, as it arrives, with backpressure:
// a slow client slows the upstream socket, not our memory. A failure after the first byte can no
// longer change the status, so an event stream ends with an error event and `data: [DONE]` (what
// vLLM itself does); a client that leaves aborts the upstream request; at the drain deadline an
// event stream ends with its own error event and [DONE] rather than a cut socket.
import type { ServerResponse } from 'node:http';
import { SSE_DONE, sseErrorFrame } from '../../shared/openai/errors.ts';

export interface UpstreamBody {
  /** The first chunk, already read (a pod's is held back until the pod is known to answer). */
  first: Uint8Array | undefined;
  rest: AsyncIterator<Uint8Array>;
  /** Stops the upstream request (the client left, or the drain deadline passed). */
  abort(): void;
  /** An event stream ends properly on a break or the drain deadline; any other body is cut. */
  eventStream: boolean;
  /** What ends an event stream that broke (default: an OpenAI error event, then `data: [DONE]`). */
  brokenEnd?: (message: string) => string;
  /** Called once when the relay ends: ok = the upstream body completed and was handed to the socket. */
  onEnd?(outcome: RelayOutcome): void;
}

export interface RelayOutcome {
  ok: boolean;
  error?: string;
  bytes: number;
}

/** When to end an event stream early (the agent's drain deadline), and what to tell the client. */
export interface RelayStop {
  signal: AbortSignal;
  message: string;
}

const chatStreamEnd = (message: string) => sseErrorFrame(502, message, { code: 'upstream_stream_error' }) + SSE_DONE;

/** Writes `body` to `res` (whose head is already written) until it ends, breaks, the client leaves, or `stop` fires. */
export async function relayTo(res: ServerResponse, body: UpstreamBody, stop?: RelayStop): Promise<RelayOutcome> {
  let bytes = 0;
  let left = false;
  let stopped = false;
  /** Wakes a write waiting for 'drain' when the relay must end instead. */
  let wake: (() => void) | undefined;
  const onClose = () => {
    if (res.writableFinished) return;
    left = true;
    body.abort();
    wake?.();
  };
  const onStop = () => {
    stopped = true;
    body.abort();
    wake?.();
  };
  res.once('close', onClose);
  if (res.destroyed) onClose(); // the client left before its answer began
  const watchStop = stop !== undefined && body.eventStream;
  if (watchStop) {
    if (stop.signal.aborted) onStop();
    else stop.signal.addEventListener('abort', onStop, { once: true });
  }
  const write = async (chunk: Uint8Array) => {
    bytes += chunk.byteLength;
    if (res.write(chunk) || left || stopped) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        res.off('drain', done);
        wake = undefined;
        resolve();
      };
      wake = done;
      res.once('drain', done);
    });
  };
  const outcome = await (async (): Promise<RelayOutcome> => {
    if (body.first) await write(body.first);
    for (;;) {
      if (left) return { ok: false, error: 'client disconnected', bytes };
      if (stopped) break;
      let next: IteratorResult<Uint8Array>;
      try {
        next = await body.rest.next();
      } catch (error) {
        if (left) return { ok: false, error: 'client disconnected', bytes };
        if (stopped) break;
        const message = `upstream failed mid-stream: ${(error as Error).message ?? error}`;
        if (body.eventStream) res.end((body.brokenEnd ?? chatStreamEnd)(message));
        else res.destroy(error as Error);
        return { ok: false, error: message, bytes };
      }
      if (next.done) {
        res.end();
        return { ok: true, bytes };
      }
      await write(next.value);
    }
    // The drain deadline: a blank line first, so whatever partial event was in flight is closed
    // off, not merged with ours.
    const message = stop!.message;
    res.end(`\n\n${sseErrorFrame(503, message, { code: 'agent_shutting_down' })}${SSE_DONE}`);
    return { ok: false, error: message, bytes };
  })();
  res.off('close', onClose);
  if (watchStop) stop.signal.removeEventListener('abort', onStop);
  body.onEnd?.(outcome);
  return outcome;
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
