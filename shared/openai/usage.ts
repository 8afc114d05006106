// Token usage as OpenAI-compatible answers report it: what the request log records and what an
// overflow budget settles with.

/** Token counts from a non-streamed answer (chat/completions, Responses, Anthropic Messages `usage`),
 *  or one streamed event that carries them (Anthropic's message_start holds them in `message`). */
export function usageOf(body: Uint8Array): { promptTokens?: number; completionTokens?: number } {
  try {
    const parsed = JSON.parse(Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8')) as {
      usage?: Record<string, unknown>;
      message?: { usage?: Record<string, unknown> };
    };
    const u = parsed?.usage ?? parsed?.message?.usage;
    if (!u || typeof u !== 'object') return {};
    const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
    return {
      promptTokens: num(u.prompt_tokens) ?? num(u.input_tokens),
      completionTokens: num(u.completion_tokens) ?? num(u.output_tokens),
    };
  } catch {
    return {};
  }
}
