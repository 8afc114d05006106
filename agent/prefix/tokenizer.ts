// The prompt's token ids as the engine will compute them: the model's own tokenizer.json and its
// chat template (tokenizer_config.json), through @huggingface/tokenizers and @huggingface/jinja.
// Pure once built (the files are read by the shell that builds it). The engine's chat endpoint
// renders the template with the generation prompt and tokenizes that text without adding special
// tokens again (the template writes them); its completions endpoint tokenizes the prompt with them.
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';

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

  constructor(files: TokenizerFiles) {
    this.#tokenizer = new Tokenizer(files.tokenizer, files.config);
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
      return this.#tokenizer.encode(text, { add_special_tokens: false }).ids;
    }
    const prompt = body.prompt;
    if (typeof prompt === 'string') return this.#tokenizer.encode(prompt).ids;
    if (Array.isArray(prompt) && prompt.every((t) => Number.isInteger(t))) return prompt as number[];
    return undefined;
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
