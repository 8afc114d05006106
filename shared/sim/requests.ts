// Validating OpenAI request bodies the way vLLM does, reduced to what the simulator needs. Pure.

import { isRecord } from '../json.ts';
import { estimateTokens, messagesText, tokenIds } from './text.ts';

export interface RequestError {
  status: number;
  message: string;
  param: string | null;
}

export interface GenerationSpec {
  kind: 'chat' | 'text' | 'responses';
  model: string;
  promptTokens: number;
  /** The prompt's token ids: given ids as they are, text through the stand-in tokenizer (`tokenIds`). */
  tokens: number[];
  /** Exact output length when the client set max_tokens / max_completion_tokens. */
  maxTokens?: number;
  /** What is left of the context window: the most a sampled length may reach. */
  capTokens: number;
  stream: boolean;
  includeUsage: boolean;
}

export interface EmbeddingSpec {
  model: string;
  /** One text per input, for deterministic vectors. */
  texts: string[];
  promptTokens: number;
}

export interface ModelRules {
  models: readonly string[];
  maxModelLen: number;
}

type Result<T> = { ok: true; value: T } | { ok: false; error: RequestError };

const fail = (status: number, message: string, param: string | null = null) =>
  ({ ok: false, error: { status, message, param } }) as const;

export function parseJson(text: string): Result<Record<string, unknown>> {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (err) {
    return fail(400, `Invalid JSON in request body: ${(err as Error).message}`);
  }
  if (!isRecord(body)) return fail(400, 'The request body must be a JSON object.');
  return { ok: true, value: body };
}

function checkModel(body: Record<string, unknown>, rules: ModelRules): Result<string> {
  const model = body.model;
  if (typeof model !== 'string' || model === '') return fail(400, 'The `model` field is required.', 'model');
  if (!rules.models.includes(model)) return fail(404, `The model \`${model}\` does not exist.`, 'model');
  return { ok: true, value: model };
}

export function parseGeneration(
  kind: GenerationSpec['kind'],
  body: Record<string, unknown>,
  rules: ModelRules,
): Result<GenerationSpec> {
  const model = checkModel(body, rules);
  if (!model.ok) return model;

  let promptTokens: number;
  let tokens: number[];
  if (kind === 'chat') {
    const messages = body.messages;
    if (!Array.isArray(messages) || messages.length === 0) {
      return fail(400, '`messages` must be a non-empty array.', 'messages');
    }
    const text = messagesText(messages);
    promptTokens = estimateTokens(text);
    tokens = tokenIds(text);
  } else if (kind === 'responses') {
    // The Responses API: `input` is a string or a list of message items; `instructions` is the system text.
    const input = body.input;
    const text =
      typeof input === 'string' ? input : Array.isArray(input) && input.length > 0 ? messagesText(input) : undefined;
    if (text === undefined) return fail(400, '`input` must be a string or a non-empty list of items.', 'input');
    const instructions = typeof body.instructions === 'string' ? body.instructions : '';
    const full = instructions ? `${instructions}\n${text}` : text;
    promptTokens = estimateTokens(full);
    tokens = tokenIds(full);
  } else {
    const prompt = promptTokenIds(body.prompt);
    if (prompt === undefined) return fail(400, '`prompt` must be a string, a list of strings or token ids.', 'prompt');
    promptTokens = prompt.length;
    tokens = prompt;
  }

  const stream = body.stream === true;
  const options = body.stream_options;
  if (options !== undefined && options !== null && !stream) {
    return fail(400, 'Stream options can only be defined when `stream=True`.', 'stream_options');
  }
  const includeUsage = stream && isRecord(options) && options.include_usage === true;

  const rawMax = kind === 'responses' ? body.max_output_tokens : (body.max_completion_tokens ?? body.max_tokens);
  let maxTokens: number | undefined;
  if (rawMax !== undefined && rawMax !== null) {
    if (typeof rawMax !== 'number' || !Number.isInteger(rawMax) || rawMax < 1) {
      return fail(400, '`max_tokens` must be an integer of at least 1.', 'max_tokens');
    }
    maxTokens = rawMax;
  }

  const requested = promptTokens + (maxTokens ?? 0);
  if (promptTokens >= rules.maxModelLen || requested > rules.maxModelLen) {
    const what = kind === 'chat' ? 'messages' : kind === 'responses' ? 'input' : 'prompt';
    return fail(
      400,
      `This model's maximum context length is ${rules.maxModelLen} tokens. However, you requested ` +
        `${requested} tokens (${promptTokens} in the ${what}, ${maxTokens ?? 0} in the completion). ` +
        `Please reduce the length of the ${what} or completion.`,
    );
  }
  return {
    ok: true,
    value: {
      kind,
      model: model.value,
      promptTokens,
      tokens,
      maxTokens,
      capTokens: rules.maxModelLen - promptTokens,
      stream,
      includeUsage,
    },
  };
}

export function parseEmbedding(body: Record<string, unknown>, rules: ModelRules): Result<EmbeddingSpec> {
  const model = checkModel(body, rules);
  if (!model.ok) return model;
  const input = body.input;
  let texts: string[];
  if (typeof input === 'string') texts = [input];
  else if (Array.isArray(input) && input.length > 0 && input.every((x) => typeof x === 'string')) {
    texts = input as string[];
  } else if (Array.isArray(input) && input.length > 0 && input.every(isTokenIds)) {
    texts = (input as number[][]).map((ids) => JSON.stringify(ids));
  } else if (isTokenIds(input)) {
    texts = [JSON.stringify(input)];
  } else {
    return fail(400, '`input` must be a string, a list of strings or token ids.', 'input');
  }
  const promptTokens = texts.reduce((sum, t) => sum + estimateTokens(t), 0);
  return { ok: true, value: { model: model.value, texts, promptTokens } };
}

/** A completions `prompt` as token ids: text, texts (joined) or the ids themselves. */
function promptTokenIds(prompt: unknown): number[] | undefined {
  if (typeof prompt === 'string') return tokenIds(prompt);
  if (isTokenIds(prompt)) return prompt;
  if (Array.isArray(prompt) && prompt.length > 0 && prompt.every((p) => typeof p === 'string')) {
    return tokenIds(prompt.join('\n'));
  }
  return undefined;
}

function isTokenIds(v: unknown): v is number[] {
  return Array.isArray(v) && v.length > 0 && v.every((x) => Number.isInteger(x));
}
