// The prompt's token ids as the engine will compute them: the model's own tokenizer.json and its
// chat template (tokenizer_config.json), through @huggingface/tokenizers and @huggingface/jinja.
// Pure once built (the files are read by the shell that builds it). The engine's chat endpoint
// renders the template with the generation prompt and tokenizes that text without adding special
// tokens again (the template writes them); its completions endpoint tokenizes the prompt with them.
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import { LRUCache } from 'lru-cache';

/** Characters of text segments whose token ids are kept (a resent context is tokenized once). */
export const DEFAULT_SEGMENT_CACHE_CHARS = 8 * 1024 * 1024;

export interface TokenizerFiles {
  /** Parsed tokenizer.json. */
  tokenizer: object;
  /** Parsed tokenizer_config.json (chat_template, bos_token, …). */
  config: Record<string, unknown>;
}

export class PromptTokenizer {
  readonly #tokenizer: Tokenizer;
  readonly #template: Template | undefined;
  readonly #specials: Record<string, string>;
  /** Splits rendered text at special tokens; undefined when the tokenizer's added tokens do not allow it. */
  readonly #split: { pattern: RegExp; ids: Map<string, number> } | undefined;
  readonly #segments: LRUCache<string, number[]>;

  constructor(files: TokenizerFiles, cacheChars = DEFAULT_SEGMENT_CACHE_CHARS) {
    this.#tokenizer = new Tokenizer(files.tokenizer, files.config);
    this.#segments = new LRUCache<string, number[]>({ maxSize: cacheChars, sizeCalculation: (_v, k) => k.length || 1 });
    this.#split = specialSplitter(files.tokenizer);
    const template = files.config.chat_template;
    this.#template = typeof template === 'string' ? new Template(template) : undefined;
    this.#specials = {};
    for (const name of ['bos_token', 'eos_token', 'pad_token', 'unk_token']) {
      const v = files.config[name];
      if (typeof v === 'string') this.#specials[name] = v;
      else if (v && typeof v === 'object' && typeof (v as { content?: unknown }).content === 'string') {
        this.#specials[name] = (v as { content: string }).content;
      }
    }
  }

  /**
   * Token ids of an OpenAI body as the engine tokenizes it, or undefined when this tokenizer cannot
   * say (no chat template for a chat body, content it does not render, a template error): the
   * caller then falls back to the approximate index.
   */
  promptTokens(body: Record<string, unknown>): number[] | undefined {
    if (Array.isArray(body.messages)) {
      const messages = plainMessages(body.messages);
      if (!messages || !this.#template) return undefined;
      let text: string;
      try {
        text = this.#template.render({ messages, add_generation_prompt: true, ...this.#specials });
      } catch {
        return undefined;
      }
      return this.#encodeSegments(text);
    }
    const prompt = body.prompt;
    if (typeof prompt === 'string') return this.#tokenizer.encode(prompt).ids;
    if (Array.isArray(prompt) && prompt.every((t) => Number.isInteger(t))) return prompt as number[];
    return undefined;
  }

  /**
   * The tokenizer splits text at its special tokens before anything else, so a chat rendering
   * is the concatenation of its pieces' ids: each piece (a message's content, mostly) is tokenized
   * once and remembered, and a context resent by every request costs a cache lookup.
   */
  #encodeSegments(text: string): number[] {
    if (!this.#split) return this.#tokenizer.encode(text, { add_special_tokens: false }).ids;
    const out: number[] = [];
    for (const piece of text.split(this.#split.pattern)) {
      if (piece === '') continue;
      const special = this.#split.ids.get(piece);
      if (special !== undefined) {
        out.push(special);
        continue;
      }
      const ids: number[] =
        this.#segments.get(piece) ?? this.#tokenizer.encode(piece, { add_special_tokens: false }).ids;
      this.#segments.set(piece, ids);
      for (const id of ids) out.push(id);
    }
    return out;
  }

  /** Token ids of plain text, with the tokenizer's special tokens (as a completions prompt). */
  encode(text: string, addSpecialTokens = true): number[] {
    return this.#tokenizer.encode(text, { add_special_tokens: addSpecialTokens }).ids;
  }
}

/** Messages with string content (text parts joined); undefined when a message has other content. */
function plainMessages(raw: unknown[]): { role: string; content: string }[] | undefined {
  const out: { role: string; content: string }[] = [];
  for (const m of raw) {
    if (!m || typeof m !== 'object') return undefined;
    const { role, content } = m as { role?: unknown; content?: unknown };
    if (typeof role !== 'string') return undefined;
    if (typeof content === 'string') out.push({ role, content });
    else if (Array.isArray(content)) {
      const parts = content.map((p) => (p && typeof p === 'object' ? (p as { text?: unknown }).text : undefined));
      if (!parts.every((p) => typeof p === 'string')) return undefined; // images etc.: not this tokenizer's
      out.push({ role, content: parts.join('') });
    } else if (content === null || content === undefined) out.push({ role, content: '' });
    else return undefined;
  }
  return out;
}

/**
 * A pattern that splits text at the tokenizer's added tokens, keeping them, when every added token
 * is matched verbatim (no stripping, not normalized); otherwise undefined (encode whole texts).
 */
function specialSplitter(tokenizer: object): { pattern: RegExp; ids: Map<string, number> } | undefined {
  const added = (tokenizer as { added_tokens?: unknown }).added_tokens;
  if (!Array.isArray(added) || added.length === 0) return undefined;
  const ids = new Map<string, number>();
  for (const t of added as {
    id?: unknown;
    content?: unknown;
    lstrip?: unknown;
    rstrip?: unknown;
    normalized?: unknown;
  }[]) {
    if (typeof t.content !== 'string' || typeof t.id !== 'number' || t.content === '') return undefined;
    if (t.lstrip || t.rstrip || t.normalized) return undefined;
    ids.set(t.content, t.id);
  }
  // Longest first, so a token that contains another is matched whole.
  const alternatives = [...ids.keys()]
    .sort((a, b) => b.length - a.length)
    .map((c) => c.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  return { pattern: new RegExp(`(${alternatives.join('|')})`), ids };
}
