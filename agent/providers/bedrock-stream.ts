// ConverseStream's binary event stream → OpenAI `chat.completion.chunk` SSE frames.
// Two pure pieces: a framer that cuts whole messages out of arbitrary TCP chunks and checks both
// CRCs (a frame may be split anywhere, several may share a chunk), and a translator that turns
// Converse events into OpenAI chunks with the state OpenAI's shape needs (tool-call indexes,
// usage arriving after messageStop).
import { crc32 } from 'node:zlib';
import { EventStreamCodec } from '@smithy/eventstream-codec';
import { fromUtf8, toUtf8 } from '@smithy/util-utf8';
import { SSE_DONE, sseErrorFrame } from '../../shared/openai/errors.ts';
import { bedrockErrorCode, bedrockErrorStatus, finishReason, toUsage } from './bedrock-converse.ts';

const PRELUDE = 12;
const MIN_MESSAGE = 16;
/** AWS's event-stream limit is 16 MiB per message; anything bigger is a corrupt length field. */
const MAX_MESSAGE = 16 * 1024 * 1024;

export type StreamEvent =
  | { type: 'event'; eventType: string; payload: Record<string, unknown> }
  | { type: 'exception'; exceptionType: string; message: string };

export class EventStreamError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'EventStreamError';
  }
}

/** Incremental decoder: push bytes as they arrive, get every complete, CRC-checked event. */
export class EventStreamDecoder {
  private readonly codec = new EventStreamCodec(toUtf8, fromUtf8);
  private buffer: Buffer = Buffer.alloc(0);

  push(chunk: Uint8Array): StreamEvent[] {
    this.buffer = this.buffer.byteLength === 0 ? Buffer.from(chunk) : Buffer.concat([this.buffer, chunk]);
    const out: StreamEvent[] = [];
    while (this.buffer.byteLength >= PRELUDE) {
      // Check the prelude CRC before trusting the length it carries.
      if (crc32(this.buffer.subarray(0, 8)) !== this.buffer.readUInt32BE(8)) {
        throw new EventStreamError('event stream prelude checksum mismatch');
      }
      const total = this.buffer.readUInt32BE(0);
      if (total < MIN_MESSAGE || total > MAX_MESSAGE)
        throw new EventStreamError(`event stream message length ${total} out of range`);
      if (this.buffer.byteLength < total) break;
      const frame = this.buffer.subarray(0, total);
      this.buffer = this.buffer.subarray(total);
      let decoded;
      try {
        decoded = this.codec.decode(frame);
      } catch {
        throw new EventStreamError('event stream message checksum mismatch');
      }
      out.push(toStreamEvent(decoded.headers, decoded.body));
    }
    return out;
  }

  /** Whether bytes of an unfinished message are pending (a stream ending here was cut short). */
  get pending(): boolean {
    return this.buffer.byteLength > 0;
  }
}

type Headers = Record<string, { type: string; value: unknown }>;

function toStreamEvent(headers: Headers, body: Uint8Array): StreamEvent {
  const str = (name: string) => {
    const h = headers[name];
    return h && typeof h.value === 'string' ? h.value : undefined;
  };
  let payload: Record<string, unknown> = {};
  if (body.byteLength > 0) {
    try {
      const parsed = JSON.parse(toUtf8(body)) as unknown;
      if (parsed && typeof parsed === 'object') payload = parsed as Record<string, unknown>;
    } catch {
      throw new EventStreamError('event stream payload is not JSON');
    }
  }
  const messageType = str(':message-type') ?? 'event';
  if (messageType === 'exception' || messageType === 'error') {
    const exceptionType = str(':exception-type') ?? str(':error-code') ?? 'unknownException';
    const message =
      typeof payload.message === 'string'
        ? payload.message
        : typeof payload.Message === 'string'
          ? payload.Message
          : (str(':error-message') ?? exceptionType);
    return { type: 'exception', exceptionType, message };
  }
  return { type: 'event', eventType: str(':event-type') ?? '', payload };
}

export interface ChunkMeta {
  id: string;
  created: number;
  model: string;
  /** The client asked `stream_options.include_usage`. */
  includeUsage: boolean;
}

/**
 * Converse events → OpenAI SSE frames. Holds `[DONE]` after messageStop until metadata (which
 * carries usage) or the end of the stream.
 */
export class ConverseStreamTranslator {
  private readonly meta: ChunkMeta;
  private readonly toolIndex = new Map<number, number>();
  private sentRole = false;
  private stopped = false;
  private finished = false;
  private failedWith = false;

  constructor(meta: ChunkMeta) {
    this.meta = meta;
  }

  /** True once `[DONE]` has been produced: nothing further is emitted. */
  get done(): boolean {
    return this.finished;
  }

  /** True when the stream ended with an error event. */
  get failed(): boolean {
    return this.failedWith;
  }

  event(ev: StreamEvent): string[] {
    if (this.finished) return [];
    if (ev.type === 'exception') {
      return this.fail(bedrockErrorStatus(ev.exceptionType, 500), ev.message, bedrockErrorCode(ev.exceptionType));
    }
    const p = ev.payload;
    const out: string[] = [];
    const ensureRole = () => {
      if (!this.sentRole) {
        this.sentRole = true;
        out.push(this.chunk({ role: 'assistant', content: '' }, null));
      }
    };
    switch (ev.eventType) {
      case 'messageStart':
        ensureRole();
        break;
      case 'contentBlockStart': {
        const use = (p.start as { toolUse?: { toolUseId?: string; name?: string } } | undefined)?.toolUse;
        if (use) {
          ensureRole();
          const index = this.toolIndex.size;
          this.toolIndex.set(Number(p.contentBlockIndex ?? index), index);
          out.push(
            this.chunk(
              {
                tool_calls: [
                  {
                    index,
                    id: use.toolUseId ?? `call_${index}`,
                    type: 'function',
                    function: { name: use.name ?? '', arguments: '' },
                  },
                ],
              },
              null,
            ),
          );
        }
        break;
      }
      case 'contentBlockDelta': {
        const delta = (p.delta ?? {}) as { text?: unknown; toolUse?: { input?: unknown } };
        if (typeof delta.text === 'string' && delta.text !== '') {
          ensureRole();
          out.push(this.chunk({ content: delta.text }, null));
        } else if (delta.toolUse && typeof delta.toolUse.input === 'string') {
          ensureRole();
          const index = this.toolIndex.get(Number(p.contentBlockIndex)) ?? Math.max(0, this.toolIndex.size - 1);
          out.push(this.chunk({ tool_calls: [{ index, function: { arguments: delta.toolUse.input } }] }, null));
        }
        // reasoningContent and other block kinds have no OpenAI chat equivalent: dropped.
        break;
      }
      case 'messageStop':
        ensureRole();
        this.stopped = true;
        out.push(this.chunk({}, finishReason(typeof p.stopReason === 'string' ? p.stopReason : undefined)));
        break;
      case 'metadata':
        if (this.meta.includeUsage) {
          out.push(this.frame({ choices: [], usage: toUsage(p.usage as Parameters<typeof toUsage>[0]) }));
        }
        if (this.stopped) {
          this.finished = true;
          out.push(SSE_DONE);
        }
        break;
      default:
        break;
    }
    return out;
  }

  /** The upstream ended. A stream without messageStop was cut short. */
  end(): string[] {
    if (this.finished) return [];
    if (!this.stopped)
      return this.fail(502, 'upstream stream ended before the message was complete', 'upstream_stream_error');
    this.finished = true;
    return [SSE_DONE];
  }

  /** Ends the stream with an OpenAI error event and `[DONE]`. */
  fail(status: number, message: string, code: string | null): string[] {
    if (this.finished) return [];
    this.finished = true;
    this.failedWith = true;
    return [sseErrorFrame(status, message, { code }), SSE_DONE];
  }

  private chunk(delta: Record<string, unknown>, finish: string | null): string {
    return this.frame({ choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] });
  }

  private frame(fields: Record<string, unknown>): string {
    const body: Record<string, unknown> = {
      id: this.meta.id,
      object: 'chat.completion.chunk',
      created: this.meta.created,
      model: this.meta.model,
      ...fields,
    };
    if (this.meta.includeUsage && !('usage' in fields)) body.usage = null;
    return `data: ${JSON.stringify(body)}\n\n`;
  }
}
