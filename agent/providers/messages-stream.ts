// ConverseStream events → the Anthropic Messages stream, pure: message_start, then per content block
// content_block_start / content_block_delta… / content_block_stop, then message_delta (stop reason
// and usage) and message_stop. Bedrock sends usage (`metadata`) after `messageStop`, so the stop
// reason is held until then; Anthropic's message_delta carries both. Converse numbers its blocks
// itself and starts a text block with its first delta; Anthropic's blocks are numbered in order
// and opened explicitly, so the translator keeps that map.
import { anthropicErrorEvent, anthropicErrorType } from '../../shared/anthropic/errors.ts';
import { bedrockErrorStatus } from './bedrock-converse.ts';
import type { StreamEvent } from './bedrock-stream.ts';
import { messagesUsage, stopReasonOf, type ConverseUsage } from './messages-converse.ts';

type Json = Record<string, unknown>;

const frame = (event: string, data: Json) => `event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`;

export class MessagesStreamTranslator {
  private readonly meta: { id: string; model: string };
  /** Converse block index → Anthropic block index, for blocks opened and not yet stopped. */
  private readonly open = new Map<number, number>();
  private blocks = 0;
  private started = false;
  private stopReason: string | undefined;
  private finished = false;
  private failedWith = false;

  constructor(meta: { id: string; model: string }) {
    this.meta = meta;
  }

  get done(): boolean {
    return this.finished;
  }

  get failed(): boolean {
    return this.failedWith;
  }

  event(ev: StreamEvent): string[] {
    if (this.finished) return [];
    if (ev.type === 'exception') return this.fail(bedrockErrorStatus(ev.exceptionType, 500), ev.message);
    const p = ev.payload;
    const out: string[] = [];
    this.ensureStarted(out);
    const index = Number(p.contentBlockIndex ?? 0);
    switch (ev.eventType) {
      case 'contentBlockStart': {
        const use = (p.start as { toolUse?: { toolUseId?: string; name?: string } } | undefined)?.toolUse;
        if (use)
          this.openBlock(out, index, { type: 'tool_use', id: use.toolUseId ?? '', name: use.name ?? '', input: {} });
        break;
      }
      case 'contentBlockDelta':
        this.delta(out, index, (p.delta ?? {}) as Json);
        break;
      case 'contentBlockStop':
        this.closeBlock(out, index);
        break;
      case 'messageStop':
        for (const open of [...this.open.keys()]) this.closeBlock(out, open);
        this.stopReason = stopReasonOf(typeof p.stopReason === 'string' ? p.stopReason : undefined);
        break;
      case 'metadata':
        if (this.stopReason !== undefined) out.push(...this.finish(p.usage as ConverseUsage | undefined));
        break;
      default:
        break;
    }
    return out;
  }

  /** The upstream ended: after messageStop without usage the message is complete all the same. */
  end(): string[] {
    if (this.finished) return [];
    if (this.stopReason === undefined) return this.fail(502, 'upstream stream ended before the message was complete');
    return this.finish(undefined);
  }

  /** Ends the stream with Anthropic's error event (a Messages stream has no [DONE]). */
  fail(status: number, message: string, _code?: string | null): string[] {
    if (this.finished) return [];
    this.finished = true;
    this.failedWith = true;
    return [anthropicErrorEvent(message, anthropicErrorType(status))];
  }

  private ensureStarted(out: string[]): void {
    if (this.started) return;
    this.started = true;
    out.push(
      frame('message_start', {
        message: {
          id: this.meta.id,
          type: 'message',
          role: 'assistant',
          model: this.meta.model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          // Bedrock counts tokens only at the end: message_delta carries the real numbers.
          usage: { input_tokens: 0, output_tokens: 0 },
        },
      }),
    );
  }

  private openBlock(out: string[], index: number, block: Json): number {
    const at = this.blocks++;
    this.open.set(index, at);
    out.push(frame('content_block_start', { index: at, content_block: block }));
    return at;
  }

  private delta(out: string[], index: number, delta: Json): void {
    const reasoning = delta.reasoningContent as { text?: unknown; signature?: unknown } | undefined;
    const use = delta.toolUse as { input?: unknown } | undefined;
    let at = this.open.get(index);
    if (typeof delta.text === 'string') {
      at ??= this.openBlock(out, index, { type: 'text', text: '' });
      out.push(frame('content_block_delta', { index: at, delta: { type: 'text_delta', text: delta.text } }));
    } else if (use && typeof use.input === 'string' && at !== undefined) {
      out.push(
        frame('content_block_delta', { index: at, delta: { type: 'input_json_delta', partial_json: use.input } }),
      );
    } else if (reasoning && (typeof reasoning.text === 'string' || typeof reasoning.signature === 'string')) {
      at ??= this.openBlock(out, index, { type: 'thinking', thinking: '' });
      const d =
        typeof reasoning.text === 'string'
          ? { type: 'thinking_delta', thinking: reasoning.text }
          : { type: 'signature_delta', signature: reasoning.signature };
      out.push(frame('content_block_delta', { index: at, delta: d }));
    }
    // Other block kinds (citations, images) have no place in this stream: dropped.
  }

  private closeBlock(out: string[], index: number): void {
    const at = this.open.get(index);
    if (at === undefined) return;
    this.open.delete(index);
    out.push(frame('content_block_stop', { index: at }));
  }

  private finish(usage: ConverseUsage | undefined): string[] {
    this.finished = true;
    return [
      frame('message_delta', {
        delta: { stop_reason: this.stopReason, stop_sequence: null },
        usage: messagesUsage(usage),
      }),
      frame('message_stop', {}),
    ];
  }
}
