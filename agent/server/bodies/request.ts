// Ingress: read a bounded body, parse it, and check the fields routing depends on. Everything
// else passes through to the model server untouched (it knows its own sampling parameters).
import { tooLarge, type ApiRequest } from '../exchange.ts';
import type { HeaderReader } from '../../forward/headers.ts';
import type { ParsedRequest, RequestKind } from '../../types.ts';
import { RequestError } from '../request-error.ts';

// Re-exported: the request path takes its error and its parsed request from the parser.
export { RequestError };
export type { ParsedRequest };

/** The body as bytes, read once, refusing (413) past `limit` without keeping the rest in memory. */
export function readBoundedBody(
  req: { headers: HeaderReader; incoming: ApiRequest },
  limit: number,
): Promise<Uint8Array> {
  const declared = Number(req.headers.get('content-length') ?? NaN);
  if (declared > limit) return Promise.reject(tooLarge(`request body is ${declared} bytes; the limit is ${limit}`));
  return req.incoming.readBody(limit);
}

/** Default for `limits.maxJsonDepth`: real chat bodies (tool schemas included) nest < 20 deep. */
export const DEFAULT_MAX_JSON_DEPTH = 64;

/**
 * Deepest array/object nesting in a JSON text, scanning bytes once (no recursion, no parse), so
 * a hostile body is refused before anything recursive downstream (token estimate, classifier,
 * JSON.stringify for a provider) can overflow the stack. Stops as soon as `limit` is passed.
 */
export function jsonDepthExceeds(bytes: Uint8Array, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i++) {
    const c = bytes[i];
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped byte
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > limit) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}

const ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool', 'function']);

function isTokenArray(value: unknown): boolean {
  return Array.isArray(value) && value.length > 0 && value.every((t) => Number.isInteger(t));
}

function checkOptional(body: Record<string, unknown>, param: string, ok: (v: unknown) => boolean, expected: string) {
  const value = body[param];
  if (value !== undefined && value !== null && !ok(value)) {
    throw new RequestError(400, `'${param}' must be ${expected}`, param, 'invalid_type');
  }
}

const positiveInteger = (v: unknown) => Number.isInteger(v) && (v as number) > 0;

function checkMessages(messages: unknown): void {
  if (!Array.isArray(messages) || messages.length === 0) {
    throw new RequestError(400, "'messages' must be a non-empty array", 'messages', 'invalid_type');
  }
  messages.forEach((m, i) => {
    if (!m || typeof m !== 'object' || Array.isArray(m))
      throw new RequestError(400, `'messages[${i}]' must be an object`, `messages[${i}]`, 'invalid_type');
    const { role, content } = m as Record<string, unknown>;
    if (typeof role !== 'string' || !ROLES.has(role)) {
      throw new RequestError(
        400,
        `'messages[${i}].role' must be one of ${[...ROLES].join(', ')}`,
        `messages[${i}].role`,
        'invalid_value',
      );
    }
    const parts =
      Array.isArray(content) &&
      content.every((p) => typeof p === 'string' || (p !== null && typeof p === 'object' && !Array.isArray(p)));
    if (content !== undefined && content !== null && typeof content !== 'string' && !parts) {
      throw new RequestError(
        400,
        `'messages[${i}].content' must be a string or an array of content parts`,
        `messages[${i}].content`,
        'invalid_type',
      );
    }
  });
}

function checkPromptLike(body: Record<string, unknown>, param: 'prompt' | 'input'): void {
  const value = body[param];
  const ok =
    typeof value === 'string' ||
    isTokenArray(value) ||
    (Array.isArray(value) &&
      value.length > 0 &&
      (value.every((v) => typeof v === 'string') || value.every(isTokenArray)));
  if (!ok)
    throw new RequestError(
      400,
      `'${param}' must be a string, an array of strings, or token ids`,
      param,
      'invalid_type',
    );
}

/** Fields of the Responses API that point at state a model server keeps in its own memory. */
const STATEFUL_RESPONSES_FIELDS = ['previous_response_id', 'conversation'] as const;

/** Anthropic Messages: max_tokens is required, messages alternate user and assistant turns. */
function checkAnthropicMessages(body: Record<string, unknown>): void {
  if (!positiveInteger(body.max_tokens))
    throw new RequestError(
      400,
      "'max_tokens' is required and must be a positive integer",
      'max_tokens',
      'invalid_type',
    );
  const messages = body.messages;
  if (!Array.isArray(messages) || messages.length === 0)
    throw new RequestError(400, "'messages' must be a non-empty array", 'messages', 'invalid_type');
  for (const [i, m] of (messages as unknown[]).entries()) {
    const message = m as { role?: unknown; content?: unknown } | null;
    if (!message || typeof message !== 'object' || (message.role !== 'user' && message.role !== 'assistant'))
      throw new RequestError(
        400,
        `messages.${i}.role must be "user" or "assistant"`,
        `messages.${i}.role`,
        'invalid_value',
      );
    if (typeof message.content !== 'string' && !Array.isArray(message.content))
      throw new RequestError(
        400,
        `messages.${i}.content must be a string or an array of content blocks`,
        `messages.${i}.content`,
        'invalid_type',
      );
  }
  checkOptional(
    body,
    'system',
    (v) => typeof v === 'string' || Array.isArray(v),
    'a string or an array of text blocks',
  );
}

function checkResponsesRequest(body: Record<string, unknown>): void {
  const input = body.input;
  if (typeof input !== 'string' && !(Array.isArray(input) && input.length > 0)) {
    throw new RequestError(
      400,
      "'input' must be a string or a non-empty array of input items",
      'input',
      'invalid_type',
    );
  }
  // Refused, not routed: each request goes to whichever pod (or provider) answers soonest, and
  // the state these ids name lives in one model server's memory (vLLM keeps it in-process, and
  // only with its response store enabled). Sending the whole conversation in `input` works anywhere.
  for (const field of STATEFUL_RESPONSES_FIELDS) {
    if (body[field] !== undefined && body[field] !== null) {
      throw new RequestError(
        400,
        `'${field}' is not supported: Kinference routes every request to whichever pod or provider answers soonest, and the state it names lives in one server's memory; send the conversation so far in 'input' instead`,
        field,
        'unsupported_parameter',
      );
    }
  }
  checkOptional(body, 'instructions', (v) => typeof v === 'string', 'a string');
  checkOptional(body, 'max_output_tokens', positiveInteger, 'a positive integer');
}

/** Parses and checks a JSON body for one of the OpenAI routes. Throws RequestError (400). */
export function parseInferenceRequest(
  kind: RequestKind,
  bytes: Uint8Array,
  maxDepth = DEFAULT_MAX_JSON_DEPTH,
): ParsedRequest {
  if (bytes.byteLength === 0)
    throw new RequestError(400, 'request body is empty; expected a JSON object', null, 'invalid_json');
  if (jsonDepthExceeds(bytes, maxDepth)) {
    throw new RequestError(400, `request body nests arrays/objects deeper than ${maxDepth} levels`, null, 'too_deep');
  }
  let body: unknown;
  try {
    body = JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8'));
  } catch (error) {
    throw new RequestError(400, `request body is not valid JSON: ${(error as Error).message}`, null, 'invalid_json');
  }
  if (!body || typeof body !== 'object' || Array.isArray(body)) {
    throw new RequestError(400, 'request body must be a JSON object', null, 'invalid_type');
  }
  const b = body as Record<string, unknown>;
  if (typeof b.model !== 'string' || b.model.length === 0) {
    throw new RequestError(400, "'model' is required and must be a non-empty string", 'model', 'invalid_type');
  }
  if (kind === 'chat') checkMessages(b.messages);
  if (kind === 'completions') checkPromptLike(b, 'prompt');
  if (kind === 'embeddings') checkPromptLike(b, 'input');
  if (kind === 'responses') checkResponsesRequest(b);
  if (kind === 'messages') checkAnthropicMessages(b);
  checkOptional(b, 'stream', (v) => typeof v === 'boolean', 'a boolean');
  checkOptional(b, 'stream_options', (v) => typeof v === 'object' && !Array.isArray(v), 'an object');
  checkOptional(b, 'max_tokens', positiveInteger, 'a positive integer');
  checkOptional(b, 'max_completion_tokens', positiveInteger, 'a positive integer');
  checkOptional(b, 'n', positiveInteger, 'a positive integer');
  checkOptional(b, 'temperature', (v) => typeof v === 'number' && v >= 0 && v <= 2, 'a number between 0 and 2');
  checkOptional(b, 'top_p', (v) => typeof v === 'number' && v >= 0 && v <= 1, 'a number between 0 and 1');
  if (kind === 'embeddings' && b.stream === true)
    throw new RequestError(400, "embeddings do not support 'stream'", 'stream', 'invalid_value');
  return { kind, body: b, model: b.model, stream: b.stream === true };
}
