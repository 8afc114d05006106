// Prompt size without a tokenizer: ~4 characters per token holds for English BPE vocabularies
// (Llama 3, GPT-4 family) within ±20%, which is well inside what the predictor learns around.
// We only need the order of magnitude (prefill cost), and a download-free estimate.

const CHARS_PER_TOKEN = 4;
/** Per-message framing tokens in chat templates (role markers, separators). */
const CHAT_MESSAGE_OVERHEAD = 4;

function textLength(value: unknown): number {
  if (typeof value === 'string') return value.length;
  if (Array.isArray(value)) {
    let total = 0;
    for (const part of value) {
      if (typeof part === 'string') total += part.length;
      else if (typeof part === 'number')
        total += CHARS_PER_TOKEN; // a token id
      else if (part && typeof part === 'object') {
        const p = part as Record<string, unknown>;
        if (typeof p.text === 'string') total += p.text.length;
        else if (Array.isArray(p)) total += textLength(p);
      }
    }
    return total;
  }
  return 0;
}

/** Estimated prompt tokens of an OpenAI chat, completions or embeddings body. */
export function estimatePromptTokens(body: Record<string, unknown>): number {
  let chars = 0;
  let overhead = 0;
  if (Array.isArray(body.messages)) {
    for (const message of body.messages as Record<string, unknown>[]) {
      overhead += CHAT_MESSAGE_OVERHEAD;
      chars += textLength(message?.content);
      const toolCalls = message?.tool_calls;
      if (Array.isArray(toolCalls)) {
        for (const call of toolCalls as { function?: { arguments?: unknown } }[]) {
          chars += textLength(call?.function?.arguments);
        }
      }
    }
  }
  if (body.prompt !== undefined) chars += textLength(body.prompt);
  if (body.input !== undefined) chars += textLength(body.input);
  return Math.max(1, Math.ceil(chars / CHARS_PER_TOKEN) + overhead);
}
