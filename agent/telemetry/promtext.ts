// Prometheus text exposition (0.0.4) and OpenMetrics parser, for the scrape path.
//
// It runs every 25–100 ms per pod on pages of a few hundred lines of which we need a dozen, so it
// reads only the samples a `MetricSelector` asks for: an unwanted line costs one scan of its name
// and an `indexOf('\n')`. The scraper feeds it the page's chunks as they come off the socket
// (`PromTextReader`): each chunk is read as Latin-1 (one byte, one character: the cheapest decode,
// and a chunk boundary can never split a character), complete lines are parsed in place, and only a
// line cut by a boundary is kept for the next chunk; label values, the only place UTF-8 matters,
// are decoded when kept. It never throws: malformed lines are skipped and counted, so the caller
// can decide whether a page with errors is still usable (the adapters decide by whether the
// series they need are there). What it produces (MetricSelector, MetricPage) is metric-page.ts.
import {
  MetricPage,
  MetricSelector,
  parseFloatToken,
  type Diagnostic,
  type Labels,
  type MetricType,
  type Series,
} from './metric-page.ts';

const NON_ASCII = /[\u0080-\u00ff]/; // a Latin-1 string of UTF-8 bytes: any byte above 127
const NO_LABELS: Labels = Object.freeze(Object.create(null) as Record<string, string>);
const MAX_DIAGNOSTICS = 5;

const TAB = 9;
const SPACE = 32;
const QUOTE = 34;
const HASH = 35;
const COMMA = 44;
const EQUALS = 61;
const BACKSLASH = 92;
const OPEN_BRACE = 123;
const CLOSE_BRACE = 125;

// Character classes by code, for the per-character loops (a table read beats a chain of compares).
// 256 entries, so a byte indexes them without a range check (bytes above 127 are 0: never in a name).
const NAME_START = new Uint8Array(256);
const NAME_CHAR = new Uint8Array(256);
const LABEL_NAME_CHAR = new Uint8Array(256);
for (let c = 0; c < 128; c++) {
  const letter = (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || c === 95; // a-z A-Z _
  const digit = c >= 48 && c <= 57;
  NAME_START[c] = letter || c === 58 ? 1 : 0; // and :
  NAME_CHAR[c] = letter || digit || c === 58 ? 1 : 0;
  LABEL_NAME_CHAR[c] = letter || digit ? 1 : 0;
}

const isNameStart = (c: number): boolean => c < 128 && NAME_START[c] === 1;
const isNameChar = (c: number): boolean => c < 128 && NAME_CHAR[c] === 1;
const isLabelNameChar = (c: number): boolean => c < 128 && LABEL_NAME_CHAR[c] === 1;

function skipBlanks(text: string, i: number, end: number): number {
  while (i < end) {
    const c = text.charCodeAt(i);
    if (c !== SPACE && c !== TAB) break;
    i++;
  }
  return i;
}

function tokenEnd(text: string, i: number, end: number): number {
  while (i < end) {
    const c = text.charCodeAt(i);
    if (c === SPACE || c === TAB) break;
    i++;
  }
  return i;
}

class PageBuilder {
  readonly samples = new Map<string, Series[]>();
  readonly types = new Map<string, MetricType>();
  errors = 0;
  readonly diagnostics: Diagnostic[] = [];
  lines = 0;
  eof = false;
  /** Text after `# EOF` was counted (once). */
  afterEof = false;

  /** The text is the page's bytes read as Latin-1: label values are UTF-8 to decode. */
  readonly bytesAsLatin1: boolean;

  constructor(bytesAsLatin1: boolean) {
    this.bytesAsLatin1 = bytesAsLatin1;
  }

  fail(reason: string): void {
    this.errors++;
    if (this.diagnostics.length < MAX_DIAGNOSTICS) this.diagnostics.push({ line: this.lines, reason });
  }
}

/** The metric types a TYPE line may name. */
const TYPES: readonly MetricType[] = [
  'counter',
  'gauge',
  'histogram',
  'summary',
  'untyped',
  'unknown',
  'info',
  'stateset',
  'gaugehistogram',
];

/** The type named by `text[start, end)` (the constant: no string made), or undefined. */
function typeAt(text: string, start: number, end: number): MetricType | undefined {
  for (let k = 0; k < TYPES.length; k++) {
    const type = TYPES[k];
    if (type.length === end - start && text.startsWith(type, start)) return type;
  }
  return undefined;
}

/** Parse a whole page, keeping only what `select` asks for (everything when omitted). Never throws. */
export function parsePromText(text: string, select: MetricSelector = EVERYTHING): MetricPage {
  const page = new PageBuilder(false);
  const length = text.length;
  let pos = 0;
  while (pos < length) {
    let next = text.indexOf('\n', pos);
    if (next === -1) next = length;
    readLine(text, pos, next, select, page);
    pos = next + 1;
    if (page.eof) {
      checkAfterEof(text, pos, page);
      break;
    }
  }
  return finish(page);
}

/**
 * One page read from its bytes in any number of chunks, as they arrive: `write` each chunk, then
 * `end` for the page. The same result as `parsePromText` of the whole page decoded as UTF-8.
 *
 * Most of a page is lines the selector doesn't want (a histogram's buckets, other families, HELP
 * text). Those are recognised in the bytes themselves (`#skippable`) and never become strings;
 * every other line is read as Latin-1 text by the same code as `parsePromText`. So a scrape leaves
 * the GC a few short strings instead of the whole page, and a chunk boundary can never split a
 * character (only a line cut by a boundary is carried over to the next chunk, as text).
 */
export class PromTextReader {
  readonly #select: MetricSelector;
  readonly #page = new PageBuilder(true);
  /** The start of a line the last chunk cut. */
  #carry = '';
  #ended = false;
  /** Where the name of the sample line `#skippable` last skipped ends; 0: a comment or nothing. */
  #skippedName = 0;
  /** The read buffer as 32-bit words, to compare names four bytes at a time (one view per buffer). */
  #words: DataView | undefined;

  constructor(select: MetricSelector = EVERYTHING) {
    this.#select = select;
  }

  write(chunk: Buffer): void {
    const page = this.#page;
    if (this.#ended) return;
    if (page.eof) {
      checkAfterEof(latin1(chunk, 0, chunk.length), 0, page);
      return;
    }
    const length = chunk.length;
    let pos = 0;
    if (this.#carry !== '') {
      const next = chunk.indexOf(LF);
      if (next === -1) {
        this.#carry += latin1(chunk, 0, length);
        return;
      }
      const line = this.#carry + latin1(chunk, 0, next);
      this.#carry = '';
      readLine(line, 0, line.length, this.#select, page);
      pos = next + 1;
    }
    // The name of the last skipped sample line in this chunk (`[named, named + nameLength)`): a
    // histogram's buckets and a family's series repeat it line after line, and a line that starts
    // with those bytes and a blank or `{` has that name, already checked (well-formed, unwanted).
    let named = -1;
    let nameLength = 0;
    const words = this.#wordsOf(chunk);
    const base = chunk.byteOffset;
    let skipped = 0; // lines skipped since page.lines was last brought up to date
    while (pos < length && !page.eof) {
      let next: number;
      const after = pos + nameLength;
      if (named >= 0 && after < length && startsLike(words, base + pos, base + named, nameLength)) {
        const c = chunk[after];
        this.#skippedName = after;
        next =
          c === OPEN_BRACE || c === SPACE || c === TAB
            ? lineEnd(chunk, words, base, after, length)
            : this.#skippable(chunk, words, base, pos, length);
      } else next = this.#skippable(chunk, words, base, pos, length);
      if (next >= 0) {
        skipped++;
        if (this.#skippedName > 0) {
          named = pos;
          nameLength = this.#skippedName - pos;
        }
      } else {
        next = lineEnd(chunk, words, base, pos, length);
        if (next < 0) break;
        page.lines += skipped; // a diagnostic names the line
        skipped = 0;
        const line = latin1(chunk, pos, next);
        readLine(line, 0, line.length, this.#select, page);
      }
      pos = next + 1;
    }
    page.lines += skipped;
    if (page.eof) checkAfterEof(latin1(chunk, pos, length), 0, page);
    else if (pos < length) this.#carry = latin1(chunk, pos, length);
  }

  /**
   * If the line at `bytes[start…]` is whole in this chunk and reading it could change nothing but
   * the line count, the index of its LF; otherwise -1 (read it as text). Such lines: a sample of a
   * well-formed name the selector doesn't want (`readSample` would stop at its name), `# HELP`, and
   * `# TYPE` of a family the selector doesn't want, named and typed (`readComment` would stop there).
   * Anything else, including every line with an error to count, goes to the text reader. A sample
   * line's name end is left in `#skippedName` (a second result without an object per line).
   */
  #skippable(bytes: Buffer, words: DataView, base: number, start: number, length: number): number {
    const select = this.#select;
    let i = start;
    this.#skippedName = 0;
    if (bytes[i] === HASH) {
      i = skipBlankBytes(bytes, i + 1, length);
      const word = i;
      while (i < length && NAME_CHAR[bytes[i]] === 1) i++;
      if (i === length || (bytes[i] !== SPACE && bytes[i] !== TAB)) return -1;
      if (i - word === 4 && isWord(bytes, word, HELP)) return lineEnd(bytes, words, base, i, length);
      if (i - word !== 4 || !isWord(bytes, word, TYPE)) return -1;
      // `# TYPE name type`: ignored when the family isn't wanted and both tokens are there.
      const name = skipBlankBytes(bytes, i, length);
      i = name;
      while (i < length && bytes[i] !== SPACE && bytes[i] !== TAB && bytes[i] !== LF) i++;
      if (i === name || select.wantsFamilyBytes(bytes, name, i)) return -1;
      i = skipBlankBytes(bytes, i, length);
      const type = bytes[i];
      if (i === length || type === LF || type === CR) return -1;
      return lineEnd(bytes, words, base, i, length);
    }
    if (NAME_START[bytes[i]] !== 1) return -1;
    i++;
    while (i < length && NAME_CHAR[bytes[i]] === 1) i++;
    if (i === length) return -1;
    const after = bytes[i];
    if (after !== OPEN_BRACE && after !== SPACE && after !== TAB) return -1;
    if (select.wantsNameBytes(bytes, start, i)) return -1;
    this.#skippedName = i;
    return lineEnd(bytes, words, base, i, length);
  }

  #wordsOf(chunk: Buffer): DataView {
    if (this.#words?.buffer !== chunk.buffer) this.#words = new DataView(chunk.buffer);
    return this.#words;
  }

  /** The page; a last line without a newline counts. */
  end(): MetricPage {
    const page = this.#page;
    if (!this.#ended && this.#carry !== '' && !page.eof)
      readLine(this.#carry, 0, this.#carry.length, this.#select, page);
    this.#ended = true;
    this.#carry = '';
    return finish(page);
  }
}

const LF = 10;

function latin1(bytes: Buffer, start: number, end: number): string {
  return bytes.toString('latin1', start, end);
}

/**
 * Whether the `n` bytes at `at` equal those at `name` (offsets in the chunk's ArrayBuffer, both
 * inside the chunk), compared a word at a time through `words`, the view of that whole buffer.
 */
function startsLike(words: DataView, at: number, name: number, n: number): boolean {
  let k = 0;
  for (; k + 4 <= n; k += 4) if (words.getUint32(at + k, true) !== words.getUint32(name + k, true)) return false;
  for (; k < n; k++) if (words.getUint8(at + k) !== words.getUint8(name + k)) return false;
  return true;
}

const HELP = [72, 69, 76, 80];
const TYPE = [84, 89, 80, 69];
const CR = 13;

function isWord(bytes: Buffer, at: number, word: readonly number[]): boolean {
  return bytes[at] === word[0] && bytes[at + 1] === word[1] && bytes[at + 2] === word[2] && bytes[at + 3] === word[3];
}

function skipBlankBytes(bytes: Buffer, i: number, length: number): number {
  while (i < length && (bytes[i] === SPACE || bytes[i] === TAB)) i++;
  return i;
}

/**
 * The index of the LF that ends the line at or after `i`, or -1 when the chunk ends first. Four
 * bytes at a time (a word holds an LF iff `word ^ 0x0a0a0a0a` has a zero byte), then the byte;
 * past `LONG` bytes the native search, which wins on a long label set. `words`: a view of the
 * buffer `bytes` lies in, `base`: the chunk's offset in it.
 */
function lineEnd(bytes: Buffer, words: DataView, base: number, i: number, length: number): number {
  const stop = Math.min(length, i + LONG);
  for (; i + 4 <= stop; i += 4) {
    const v = words.getUint32(base + i, true) ^ 0x0a0a0a0a;
    if (((v - 0x01010101) & ~v & 0x80808080) !== 0) break;
  }
  if (i + 4 > stop && stop < length) return bytes.indexOf(LF, i);
  while (i < length && bytes[i] !== LF) i++;
  return i < length ? i : -1;
}

const LONG = 64;

/** One line, `text[start, end)` without its newline. */
function readLine(text: string, start: number, end: number, select: MetricSelector, page: PageBuilder): void {
  if (end > start && text.charCodeAt(end - 1) === 13) end--; // CRLF
  page.lines++;
  start = skipBlanks(text, start, end);
  if (start >= end) return;
  if (text.charCodeAt(start) === HASH) readComment(text, start + 1, end, select, page);
  else readSample(text, start, end, select, page);
}

/** After `# EOF` only blank text may follow. */
function checkAfterEof(text: string, from: number, page: PageBuilder): void {
  if (page.afterEof || text.slice(from).trim() === '') return;
  page.afterEof = true;
  page.fail('content after # EOF');
}

function finish(page: PageBuilder): MetricPage {
  return new MetricPage(page.samples, page.types, page);
}

const EVERYTHING = MetricSelector.everything();

/** Handles `# HELP`, `# TYPE`, `# UNIT`, `# EOF` (sets `page.eof`) and plain comments. */
function readComment(text: string, i: number, end: number, select: MetricSelector, page: PageBuilder): void {
  i = skipBlanks(text, i, end);
  const wordEnd = tokenEnd(text, i, end);
  const word = wordEnd - i;
  if (word === 3 && text.startsWith('EOF', i)) {
    page.eof = true;
    return;
  }
  if (word !== 4 || !text.startsWith('TYPE', i)) return; // HELP, UNIT, comments: nothing we use
  const nameStart = skipBlanks(text, wordEnd, end);
  const nameEnd = tokenEnd(text, nameStart, end);
  const typeStart = skipBlanks(text, nameEnd, end);
  const typeEnd = tokenEnd(text, typeStart, end);
  if (nameStart === nameEnd || typeStart === typeEnd) {
    page.fail('malformed TYPE line');
    return;
  }
  // The selector's own family string and the type constant: nothing sliced, hashes already known.
  const family = select.familyAt(text, nameStart, nameEnd);
  if (family === undefined) return;
  const type = typeAt(text, typeStart, typeEnd);
  if (type !== undefined) page.types.set(family, type);
  else page.fail(`unknown metric type "${text.slice(typeStart, Math.min(typeEnd, typeStart + 40))}"`);
}

function readSample(text: string, start: number, end: number, select: MetricSelector, page: PageBuilder): void {
  let i = start;
  if (!isNameStart(text.charCodeAt(i))) {
    page.fail('expected a metric name');
    return;
  }
  i++;
  while (i < end && isNameChar(text.charCodeAt(i))) i++;
  const nameEnd = i;
  const after = i < end ? text.charCodeAt(i) : -1;
  if (after !== OPEN_BRACE && after !== SPACE && after !== TAB) {
    page.fail(after === -1 ? 'sample without a value' : 'invalid character in metric name');
    return;
  }
  const name = select.nameAt(text, start, nameEnd);
  if (name === undefined) return;

  let labels = NO_LABELS;
  i = skipBlanks(text, i, end); // blanks may separate the name from `{`
  if (i < end && text.charCodeAt(i) === OPEN_BRACE) {
    const read = readLabels(text, i + 1, end, page.bytesAsLatin1, select);
    if (typeof read === 'string') {
      page.fail(read);
      return;
    }
    labels = read;
    i = labelsEnd;
  }
  i = skipBlanks(text, i, end);
  const valueEnd = tokenEnd(text, i, end);
  const value = numberAt(text, i, valueEnd);
  if (value === undefined) {
    page.fail(i === valueEnd ? 'sample without a value' : 'invalid sample value');
    return;
  }
  i = skipBlanks(text, valueEnd, end);
  let timestamp: number | undefined;
  if (i < end && text.charCodeAt(i) !== HASH) {
    const tsEnd = tokenEnd(text, i, end);
    timestamp = parseFloatToken(text.slice(i, tsEnd));
    if (timestamp === undefined || !Number.isFinite(timestamp)) {
      page.fail('invalid timestamp');
      return;
    }
    i = skipBlanks(text, tsEnd, end);
    if (i < end && text.charCodeAt(i) !== HASH) {
      page.fail('unexpected text after the timestamp');
      return;
    }
  }
  // Whatever follows ` # ` is an OpenMetrics exemplar: not needed for load.

  const series: Series = timestamp === undefined ? { labels, value } : { labels, value, timestamp };
  const list = page.samples.get(name);
  if (list === undefined) page.samples.set(name, [series]);
  else list.push(series);
}

/** Where `readLabels` ended: the index after `}`. */
let labelsEnd = 0;

/** 10^k for k ≤ 22: exact in a double. */
const POW10 = Array.from({ length: 23 }, (_, k) => 10 ** k);

/**
 * `parseFloatToken(text.slice(start, end))`, without the string for a plain decimal (the usual
 * sample value: `3.0`, `0.4375`, `-12`). Exact: a decimal of at most 2^53 as an integer with at
 * most 22 digits after the point is that integer divided by a power of ten, both exact doubles, so
 * the one division rounds correctly, as `Number` does. Anything else is parsed from its string.
 */
function numberAt(text: string, start: number, end: number): number | undefined {
  let i = start;
  const negative = i < end && text.charCodeAt(i) === 45; // -
  if (negative) i++;
  let mantissa = 0;
  let digits = 0;
  let fraction = -1; // digits after the point; -1 before one
  for (; i < end; i++) {
    const c = text.charCodeAt(i);
    if (c >= 48 && c <= 57) {
      if (mantissa > 900_719_925_474_098) break; // ×10 + 9 would pass 2^53
      mantissa = mantissa * 10 + (c - 48);
      digits++;
      if (fraction >= 0) fraction++;
    } else if (c === 46 && fraction < 0)
      fraction = 0; // .
    else break;
  }
  if (i !== end || digits === 0 || fraction > 22) return parseFloatToken(text.slice(start, end));
  const value = fraction > 0 ? mantissa / POW10[fraction] : mantissa;
  return negative ? -value : value;
}

/**
 * Reads `name="value", ...}` starting after `{`; returns the labels (and sets `labelsEnd`), or an
 * error. `bytesAsLatin1`: values with non-ASCII characters are UTF-8 bytes, decoded here. Labels
 * the selector doesn't keep are checked the same way but never made into strings.
 */
function readLabels(
  text: string,
  i: number,
  end: number,
  bytesAsLatin1: boolean,
  select: MetricSelector,
): Labels | string {
  const every = select.keepsEveryLabel;
  let labels: Record<string, string> | undefined = every ? {} : undefined;
  while (true) {
    i = skipBlanks(text, i, end);
    if (i >= end) return 'unterminated label set';
    if (text.charCodeAt(i) === CLOSE_BRACE) {
      labelsEnd = i + 1;
      return labels ?? NO_LABELS;
    }

    const nameStart = i;
    while (i < end && isLabelNameChar(text.charCodeAt(i))) i++;
    if (i === nameStart) return 'expected a label name';
    const name = every ? text.slice(nameStart, i) : select.labelAt(text, nameStart, i);
    i = skipBlanks(text, i, end);
    if (i >= end || text.charCodeAt(i) !== EQUALS) return 'expected = after a label name';
    i = skipBlanks(text, i + 1, end);
    if (i >= end || text.charCodeAt(i) !== QUOTE) return 'expected a quoted label value';
    i++;

    if (name === undefined) {
      // Not kept: find the closing quote past any escapes, as `readEscapedValue` would.
      while (i < end) {
        const c = text.charCodeAt(i);
        if (c === QUOTE) break;
        i += c === BACKSLASH ? 2 : 1;
      }
      if (i >= end) return 'unterminated label value';
      i = skipBlanks(text, i + 1, end);
      if (i >= end) return 'unterminated label set';
      const c = text.charCodeAt(i);
      if (c === COMMA) i++;
      else if (c !== CLOSE_BRACE) return 'expected , or } after a label value';
      continue;
    }

    // Fast path: no escapes, one slice.
    let j = i;
    let nonAscii = false;
    while (j < end) {
      const c = text.charCodeAt(j);
      if (c === QUOTE || c === BACKSLASH) break;
      if (c > 127) nonAscii = true;
      j++;
    }
    let value: string;
    if (j < end && text.charCodeAt(j) === QUOTE) {
      value = text.slice(i, j);
    } else {
      const read = readEscapedValue(text, i, end);
      if (read === undefined) return 'unterminated label value';
      value = read.value;
      j = read.quoteAt;
      nonAscii = NON_ASCII.test(value);
    }
    // Escapes are ASCII, so the bytes between them are whole UTF-8 characters.
    if (bytesAsLatin1 && nonAscii) value = Buffer.from(value, 'latin1').toString('utf8');
    labels ??= {};
    if (name === '__proto__') Object.defineProperty(labels, name, { value, enumerable: true });
    else labels[name] = value;

    i = skipBlanks(text, j + 1, end);
    if (i >= end) return 'unterminated label set';
    const c = text.charCodeAt(i);
    if (c === COMMA)
      i++; // a trailing comma before `}` is legal
    else if (c !== CLOSE_BRACE) return 'expected , or } after a label value';
  }
}

function readEscapedValue(text: string, i: number, end: number): { value: string; quoteAt: number } | undefined {
  let value = '';
  let runStart = i;
  while (i < end) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) return { value: value + text.slice(runStart, i), quoteAt: i };
    if (c === BACKSLASH) {
      if (i + 1 >= end) return undefined;
      value += text.slice(runStart, i);
      const e = text.charCodeAt(i + 1);
      // The format defines \\ \" \n; keep any other escape verbatim rather than reject the line.
      value += e === 110 ? '\n' : e === BACKSLASH ? '\\' : e === QUOTE ? '"' : text.slice(i, i + 2);
      i += 2;
      runStart = i;
    } else {
      i++;
    }
  }
  return undefined;
}
