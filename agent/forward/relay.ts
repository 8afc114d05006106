// Relays an upstream body to the client's socket chunk by chunk, as it arrives, with backpressure:
// a slow client slows the upstream socket, not our memory. A failure after the first byte can no
// longer change the status, so an event stream ends with an error event and `data: [DONE]` (what
// vLLM itself does); a client that leaves aborts the upstream request; at the drain deadline an
// event stream ends with its own error event and [DONE] rather than a cut socket.
import { SSE_DONE, sseErrorFrame } from '../../shared/openai/errors.ts';

/** Where a body's chunks go, as they arrive. */
export interface ChunkSink {
  /** One chunk; false asks the source to pause until `resume()`. */
  data(chunk: Uint8Array): boolean;
  /** Once: the body ended (no error) or broke. */
  end(error?: Error): void;
}

/** An upstream body pushed chunk by chunk (undici's dispatch callbacks, or a provider's stream). */
export interface ChunkSource {
  /** Starts delivering the chunks not yet taken to `sink`. Called once. */
  flow(sink: ChunkSink): void;
  /** More chunks, please (after `data` returned false). */
  resume(): void;
  /** Stops the upstream request; a flowing sink then ends with `reason`. */
  abort(reason: Error): void;
}

export interface UpstreamBody {
  /** The first chunk, already taken (a pod's is held back until the pod is known to answer). */
  first: Uint8Array | undefined;
  source: ChunkSource;
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

/** What the relay needs of the client's answer: the server's ApiResponse (and node:http's) fits it. */
export interface RelaySink {
  readonly destroyed: boolean;
  readonly writableFinished: boolean;
  write(chunk: Uint8Array | string): boolean;
  end(chunk?: Uint8Array | string): unknown;
  destroy(error?: Error): unknown;
  on(event: 'drain' | 'close', listener: () => void): this;
  off(event: 'drain' | 'close', listener: () => void): this;
}

/** When to end an event stream early (the agent's drain deadline), and what to tell the client. */
export interface RelayStop {
  signal: AbortSignal;
  message: string;
}

const chatStreamEnd = (message: string) => sseErrorFrame(502, message, { code: 'upstream_stream_error' }) + SSE_DONE;

/**
 * Writes `body` to `res` (whose head is already written) as its chunks arrive, until it ends,
 * breaks, the client leaves, or `stop` fires. The socket's 'drain' resumes a paused source.
 */
export function relayTo(res: RelaySink, body: UpstreamBody, stop?: RelayStop): Promise<RelayOutcome> {
  return new Promise((resolve) => {
    const { source } = body;
    const watchStop = stop !== undefined && body.eventStream;
    let bytes = 0;
    let done = false;
    const finish = (outcome: RelayOutcome) => {
      if (done) return;
      done = true;
      res.off('drain', onDrain).off('close', onClose);
      if (watchStop) stop.signal.removeEventListener('abort', onStop);
      body.onEnd?.(outcome);
      resolve(outcome);
    };
    const onDrain = () => source.resume();
    const onClose = () => {
      if (res.writableFinished) return;
      finish({ ok: false, error: 'client disconnected', bytes });
      source.abort(new Error('client disconnected'));
    };
    const onStop = () => {
      if (done) return;
      const message = stop!.message;
      finish({ ok: false, error: message, bytes });
      source.abort(new Error(message));
      // A blank line first: whatever partial event was in flight is closed off, not merged with ours.
      res.end(`\n\n${sseErrorFrame(503, message, { code: 'agent_shutting_down' })}${SSE_DONE}`);
    };
    res.on('drain', onDrain).on('close', onClose); // finish() removes both
    if (res.destroyed) return onClose(); // the client left before its answer began
    if (watchStop) {
      if (stop.signal.aborted) return onStop();
      stop.signal.addEventListener('abort', onStop, { once: true });
    }
    if (body.first) {
      bytes += body.first.byteLength;
      res.write(body.first);
    }
    source.flow({
      data: (chunk) => {
        if (done) return false;
        bytes += chunk.byteLength;
        return res.write(chunk);
      },
      end: (error) => {
        if (done) return;
        if (!error) {
          res.end();
          return finish({ ok: true, bytes });
        }
        const message = `upstream failed mid-stream: ${error.message}`;
        if (body.eventStream) res.end((body.brokenEnd ?? chatStreamEnd)(message));
        else res.destroy(error);
        finish({ ok: false, error: message, bytes });
      },
    });
  });
}

/** Reads the rest of a (non-stream) body into one buffer; past `limitBytes` the upstream is aborted. */
export function readRest(first: Uint8Array | undefined, source: ChunkSource, limitBytes: number): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const tooLarge = () => new Error(`upstream body larger than ${limitBytes} bytes`);
    // The first chunk counts like the others: one read can be past a small limit on its own.
    if (first && first.byteLength > limitBytes) {
      const error = tooLarge();
      source.abort(error);
      return reject(error);
    }
    const chunks: Uint8Array[] = first ? [first] : [];
    let total = first?.byteLength ?? 0;
    source.flow({
      data: (chunk) => {
        total += chunk.byteLength;
        if (total <= limitBytes) {
          chunks.push(chunk);
          return true;
        }
        source.abort(tooLarge());
        return false;
      },
      end: (error) => (error ? reject(error) : resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, total))),
    });
  });
}
