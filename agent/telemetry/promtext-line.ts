// One line of the Prometheus text exposition or OpenMetrics, parsed in place from the page's text
// into a PageBuilder: comments (TYPE, EOF), samples, labels and numbers. promtext.ts feeds it
// lines, from a whole page or from chunks off the socket.
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

export const TAB = 9;
export const SPACE = 32;
const QUOTE = 34;
export const HASH = 35;
const COMMA = 44;
const EQUALS = 61;
const BACKSLASH = 92;
export const OPEN_BRACE = 123;
const CLOSE_BRACE = 125;

// Character classes by code, for the per-character loops (a table read beats a chain of compares).
// 256 entries, so a byte indexes them without a range check (bytes above 127 are 0: never in a name).
export const NAME_START = new Uint8Array(256);
export const NAME_CHAR = new Uint8Array(256);
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

export class PageBuilder {
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

/** One line, `text[start, end)` without its newline. */
export function readLine(text: string, start: number, end: number, select: MetricSelector, page: PageBuilder): void {
  if (end > start && text.charCodeAt(end - 1) === 13) end--; // CRLF
  page.lines++;
  start = skipBlanks(text, start, end);
  if (start >= end) return;
  if (text.charCodeAt(start) === HASH) readComment(text, start + 1, end, select, page);
  else readSample(text, start, end, select, page);
}

/** After `# EOF` only blank text may follow. */
export function checkAfterEof(text: string, from: number, page: PageBuilder): void {
  if (page.afterEof || text.slice(from).trim() === '') return;
  page.afterEof = true;
  page.fail('content after # EOF');
}

export function finish(page: PageBuilder): MetricPage {
  return new MetricPage(page.samples, page.types, page);
}

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
