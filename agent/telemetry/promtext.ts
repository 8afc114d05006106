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
import { MetricPage, MetricSelector } from './metric-page.ts';
import {
  checkAfterEof,
  finish,
  HASH,
  NAME_CHAR,
  NAME_START,
  OPEN_BRACE,
  PageBuilder,
  readLine,
  SPACE,
  TAB,
} from './promtext-line.ts';

const EVERYTHING = MetricSelector.everything();

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
