// Every string in a request body, wherever it sits: the classifier does not keep a list of the
// fields OpenAI or vLLM define, because tomorrow's field would be a leak. Pure, bounded.
//
// What the walker cannot read as text it reports as unscanned instead of skipping: media parts
// (images, audio, video, files), data: URLs and base64 blobs, token-id prompts, and whatever lies
// past the depth, node or character bound.

export type PathSegment = string | number;

export interface ScanLimits {
  /** Deepest nesting read; anything deeper is unscanned. */
  maxDepth: number;
  /** Characters of text (strings, keys, joined parts) read; past it the rest is unscanned. */
  maxChars: number;
  /** JSON values (objects, arrays, strings, numbers) visited; past it the rest is unscanned. */
  maxNodes: number;
}

export const DEFAULT_SCAN_LIMITS: ScanLimits = { maxDepth: 32, maxChars: 4 * 1024 * 1024, maxNodes: 200_000 };

export type UnscannedReason = 'media' | 'blob' | 'token-ids' | 'depth' | 'size';

export interface WalkVisitor {
  /**
   * A text at `path` (the walker's own array, only valid during the call); `seam`: read across
   * the boundaries between the items of the array at `path`.
   */
  text(text: string, path: readonly PathSegment[], seam: boolean): void;
  unscanned(reason: UnscannedReason, path: readonly PathSegment[]): void;
}

/** Content-part and item types whose payload is not text (OpenAI chat/responses, vLLM, Anthropic-style). */
const MEDIA_TYPES = new Set([
  'image_url',
  'input_image',
  'image',
  'input_audio',
  'audio',
  'audio_url',
  'video_url',
  'video',
  'file',
  'input_file',
]);
/** Keys that carry such a payload, whatever the part's type says. */
const MEDIA_KEYS = new Set([
  'image_url',
  'input_audio',
  'audio_url',
  'video_url',
  'file',
  'file_data',
  'file_id',
  'image_data',
]);
/** Keys whose integer arrays are prompts as token ids (completions `prompt`, embeddings `input`, vLLM). */
const TOKEN_KEYS = new Set(['prompt', 'input', 'prompt_token_ids', 'input_ids', 'token_ids']);
/** A longer integer array anywhere is token ids too, whatever its key. */
const TOKEN_ARRAY_LENGTH = 32;
/** Below this a string is read as text even if it looks like base64 (ids, hashes, short words). */
const BLOB_LENGTH = 256;
const BLOB = /^[A-Za-z0-9+/_-]+={0,2}$/;
/** `data:image/png;base64,…`, `data:text/plain,…`: inlined files, whatever their encoding. */
const DATA_URL = /^\s*data:[\w.+-]+\/[\w.+-]+[;,]/i;
/** Integers this large may be a card, phone or account number written as a JSON number. */
const NUMBER_AS_TEXT = 1e8;
/** Field names of the OpenAI/vLLM request schemas: keys, not data, and on every request. */
const API_KEYS = new Set([
  'messages',
  'content',
  'tool_calls',
  'function',
  'arguments',
  'tool_call_id',
  'image_url',
  'input_audio',
  'max_tokens',
  'max_completion_tokens',
  'temperature',
  'response_format',
  'json_schema',
  'properties',
  'description',
  'required',
  'metadata',
  'stream_options',
  'include_usage',
  'frequency_penalty',
  'presence_penalty',
  'reasoning_content',
  'refusal',
  'prediction',
  'documents',
  'file_data',
  'filename',
  'logprobs',
  'top_logprobs',
  'tool_choice',
  'parallel_tool_calls',
  'function_call',
  'functions',
  'prompt_token_ids',
  'stop_token_ids',
  'chat_template_kwargs',
  'encoding_format',
  'dimensions',
  'reasoning_effort',
]);
/** Characters either side of a seam read again: any value up to this long that a seam splits is found whole. */
const SEAM = 64;
/** Strings shorter than this cannot hold an address (a@b.co) or a 9-digit number. */
const SHORTEST_FINDING = 6;

class Bounded extends Error {}

export function walkBody(body: unknown, limits: ScanLimits, visitor: WalkVisitor): void {
  const path: PathSegment[] = [];
  let chars = 0;
  let nodes = 0;

  const read = (text: string, seam = false) => {
    chars += text.length;
    if (chars > limits.maxChars) {
      visitor.unscanned('size', path);
      throw new Bounded();
    }
    visitor.text(text, path, seam);
  };

  const string = (text: string) => {
    if ((text.length >= BLOB_LENGTH && BLOB.test(text)) || DATA_URL.test(text)) return visitor.unscanned('blob', path);
    if (text.length >= SHORTEST_FINDING) read(text);
  };

  const value = (v: unknown, depth: number, inTokenKey: boolean, seamsRead = false): void => {
    if (++nodes > limits.maxNodes) {
      visitor.unscanned('size', path);
      throw new Bounded();
    }
    if (typeof v === 'string') return string(v);
    if (typeof v === 'number') {
      // As the provider receives it; a negative number's digits are the same number.
      if (Number.isInteger(v) && Math.abs(v) >= NUMBER_AS_TEXT) read(String(Math.abs(v)));
      return;
    }
    if (typeof v !== 'object' || v === null) return;
    if (depth >= limits.maxDepth) return visitor.unscanned('depth', path);
    if (Array.isArray(v)) return array(v, depth, inTokenKey, seamsRead);
    object(v as Record<string, unknown>, depth, inTokenKey, seamsRead);
  };

  // `seamsRead`: this array is an item's content whose seams the enclosing array already read.
  const array = (items: unknown[], depth: number, inTokenKey: boolean, seamsRead: boolean) => {
    if (items.length > 0 && typeof items[0] === 'number' && items.every(Number.isInteger)) {
      if (inTokenKey || items.length >= TOKEN_ARRAY_LENGTH) return visitor.unscanned('token-ids', path);
    }
    // Text split across items (`jane.doe@` + `example.com`: two content parts, two messages, a
    // message's name and its content, two /v1/responses input items) is read once more as a whole.
    const segments: string[] = [];
    if (!seamsRead) for (const item of items) segmentsOf(item, segments);
    const covered = segments.length > 1;
    for (let i = 0; i < items.length; i++) {
      path.push(i);
      value(items[i], depth + 1, inTokenKey, covered);
      path.pop();
    }
    if (covered) readSeams(segments, read);
  };

  const object = (record: Record<string, unknown>, depth: number, inTokenKey: boolean, seamsRead: boolean) => {
    if (typeof record.type === 'string' && MEDIA_TYPES.has(record.type)) visitor.unscanned('media', path);
    for (const key in record) {
      const child = record[key];
      if (child === undefined) continue;
      path.push(key);
      if (key.length >= SHORTEST_FINDING && !API_KEYS.has(key)) read(key);
      if (MEDIA_KEYS.has(key) && child !== null && child !== '') visitor.unscanned('media', path);
      value(child, depth + 1, inTokenKey || TOKEN_KEYS.has(key), seamsRead && key === 'content');
      path.pop();
    }
  };

  try {
    value(body, 0, false);
  } catch (error) {
    if (!(error instanceof Bounded)) throw error;
  }
}

// Only the seams need a second look: walkBody read each part whole. A window of SEAM
// characters either side of every boundary holds any value split there (several short parts
// in a row fall inside one window). Where digits meet digits the seam is also read with a
// space in it: `4111 1111` + `1111 1111` is a card only when the parts stay apart, while
// `41111111` + `11111111` is one only when they join.
function readSeams(parts: string[], read: (text: string, seam: boolean) => void): void {
  // Offsets into the texts as if joined, without joining them (a chat's texts can be megabytes).
  const offsets = new Array<number>(parts.length + 1);
  offsets[0] = 0;
  for (let i = 0; i < parts.length; i++) offsets[i + 1] = offsets[i] + parts[i].length;
  const total = offsets[parts.length];
  let from = -1;
  let to = -1;
  for (let i = 1; i < parts.length; i++) {
    const boundary = offsets[i];
    const start = Math.max(0, boundary - SEAM);
    const end = Math.min(total, boundary + SEAM);
    if (boundary > 0 && boundary < total && digitEndsBefore(parts, i) && digitStartsAt(parts, i))
      read(`${joinedSlice(parts, offsets, start, boundary)} ${joinedSlice(parts, offsets, boundary, end)}`, true);
    if (from !== -1 && start <= to) {
      to = end;
      continue;
    }
    if (from !== -1) read(joinedSlice(parts, offsets, from, to), true);
    from = start;
    to = end;
  }
  if (from !== -1) read(joinedSlice(parts, offsets, from, to), true);
}

/**
 * The texts of one item of an array, in the order a model reads them: a string; a content part's
 * `text`; a message's `name`, then its `content` (a string, or its parts' texts); a tool
 * output's `output`.
 */
function segmentsOf(item: unknown, out: string[]): void {
  if (typeof item === 'string') {
    out.push(item);
    return;
  }
  if (typeof item !== 'object' || item === null || Array.isArray(item)) return;
  const { name, text, content, output } = item as Record<string, unknown>;
  if (typeof name === 'string') out.push(name);
  if (typeof text === 'string') out.push(text);
  if (typeof content === 'string') out.push(content);
  else if (Array.isArray(content))
    for (const part of content) {
      if (typeof part === 'string') out.push(part);
      else if (typeof part === 'object' && part !== null) {
        const partText = (part as { text?: unknown }).text;
        if (typeof partText === 'string') out.push(partText);
      }
    }
  if (typeof output === 'string') out.push(output);
}

/** Characters [from, to) of the texts as if joined. */
function joinedSlice(parts: readonly string[], offsets: readonly number[], from: number, to: number): string {
  let out = '';
  // The first part that reaches past `from`: a binary search, the array may hold thousands.
  let lo = 0;
  let hi = parts.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (offsets[mid] <= from) lo = mid;
    else hi = mid - 1;
  }
  for (let i = lo; i < parts.length && offsets[i] < to; i++)
    out += parts[i].slice(Math.max(0, from - offsets[i]), Math.min(parts[i].length, to - offsets[i]));
  return out;
}

/** Whether the text before the boundary at part `i` ends with a digit (skipping empty parts). */
function digitEndsBefore(parts: readonly string[], i: number): boolean {
  for (let k = i - 1; k >= 0; k--) if (parts[k].length > 0) return isDigitAt(parts[k], parts[k].length - 1);
  return false;
}

function digitStartsAt(parts: readonly string[], i: number): boolean {
  for (let k = i; k < parts.length; k++) if (parts[k].length > 0) return isDigitAt(parts[k], 0);
  return false;
}

function isDigitAt(s: string, i: number): boolean {
  const c = s.charCodeAt(i);
  return c >= 48 && c <= 57;
}
