// The blocks of a prompt as this agent sends it, named the way a prefix cache names them. Pure.
//
// The agent has no tokenizer, so a block is approximated by characters: BLOCK_TOKENS tokens of
// ~4 characters each (the estimate agent/predict/tokens.ts uses for prompt size), i.e. 64
// characters of the rendered prompt by default. Each block's name is a hash chained over every
// character before it, so two prompts share block i exactly when their first (i + 1) · 64
// characters are equal: a resent chat history or a shared system prompt matches, a prompt that
// differs anywhere earlier does not. The server's real block boundaries fall elsewhere (its
// tokenizer is not 4 characters per token), so the estimate errs by about a block per prompt and
// by the characters/token ratio: good enough to rank pods, which is all it is used for.

/** Tokens per cache block: vLLM's default --block-size. */
export const BLOCK_TOKENS = 16;
/** Characters per token, the same approximation the prompt-size estimate uses. */
export const CHARS_PER_TOKEN = 4;
/**
 * Blocks of a prompt hashed by default: 16k tokens (64 KB of text). Conversations' histories run
 * past 4k tokens; capped at 256 blocks (4k tokens), the holder of a 6k-token history looked
 * barely better than an empty pod and bench:routing-prefix's multi-turn p90 rose 93 → 128 ms.
 */
export const DEFAULT_PREFIX_MAX_BLOCKS = 1024;

/**
 * The text a prefix cache sees for an OpenAI body, in order: chat messages (role, content parts,
 * tool-call arguments), the completions prompt, or the Responses instructions and input. Token ids
 * are written out so equal ids give equal text. Deterministic: the same body, the same text.
 */
export function renderPrompt(body: Record<string, unknown>): string {
  const out: string[] = [];
  if (typeof body.instructions === 'string') out.push(body.instructions, '\n');
  if (Array.isArray(body.messages)) renderMessages(body.messages, out);
  if (body.prompt !== undefined) renderContent(body.prompt, out);
  if (typeof body.input === 'string') out.push(body.input);
  else if (Array.isArray(body.input)) renderMessages(body.input, out);
  return out.join('');
}

function renderMessages(messages: unknown[], out: string[]): void {
  for (const message of messages) {
    if (!message || typeof message !== 'object') continue;
    const m = message as Record<string, unknown>;
    // Role markers as a chat template writes them: the same history renders the same prefix.
    out.push('<|', typeof m.role === 'string' ? m.role : '', '|>');
    renderContent(m.content, out);
    if (Array.isArray(m.tool_calls)) {
      for (const call of m.tool_calls as { function?: { name?: unknown; arguments?: unknown } }[]) {
        renderContent(call?.function?.name, out);
        renderContent(call?.function?.arguments, out);
      }
    }
    out.push('\n');
  }
}

function renderContent(value: unknown, out: string[]): void {
  if (typeof value === 'string') out.push(value);
  else if (typeof value === 'number')
    out.push(`⟨${value}⟩`.padEnd(CHARS_PER_TOKEN, ' ')); // one token id ≈ one token
  else if (Array.isArray(value)) {
    for (const part of value) {
      if (typeof part === 'string' || typeof part === 'number' || Array.isArray(part)) renderContent(part, out);
      else if (part && typeof part === 'object' && typeof (part as { text?: unknown }).text === 'string') {
        out.push((part as { text: string }).text);
      }
    }
  }
}

/**
 * Chained hashes of the full blocks of `text`, at most `maxBlocks` (a partial last block is never cached, as in vLLM):
 * entry i names characters [0, (i + 1) · blockChars). Two 32-bit lanes folded into a 52-bit safe
 * integer: collisions are negligible at the ~10⁵ blocks a pod holds.
 */
export function promptBlocks(
  text: string,
  blockChars = BLOCK_TOKENS * CHARS_PER_TOKEN,
  maxBlocks = Infinity,
): number[] {
  // `maxBlocks` bounds the hashing a huge prompt costs (GIE's maxPrefixBlocksToMatch does the same).
  const full = Math.min(maxBlocks, Math.floor(text.length / blockChars));
  const out = new Array<number>(full);
  let a = 0x811c9dc5;
  let b = 0x9747b28c;
  for (let block = 0; block < full; block++) {
    for (let i = block * blockChars; i < (block + 1) * blockChars; i++) {
      const c = text.charCodeAt(i);
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x5bd1e995);
      b ^= b >>> 13;
    }
    out[block] = (a >>> 0) * 0x100000 + ((b >>> 0) & 0xfffff);
  }
  return out;
}
