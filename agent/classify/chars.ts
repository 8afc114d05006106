// ASCII character classes and token edges the built-in detectors share. Pure.

export const SPACE = 32,
  PLUS = 43,
  DASH = 45,
  DOT = 46,
  LPAREN = 40,
  RPAREN = 41;

// ASCII character classes in one table: a lookup instead of chains of comparisons.
const DIGIT = 1,
  UPPER = 2,
  LOWER = 4,
  WORD = 8,
  BLOCKS = 16;
const ASCII = new Uint8Array(128);
for (let c = 48; c <= 57; c++) ASCII[c] = DIGIT | WORD | BLOCKS;
for (let c = 65; c <= 90; c++) ASCII[c] = UPPER | WORD | BLOCKS;
for (let c = 97; c <= 122; c++) ASCII[c] = LOWER | WORD | BLOCKS;
ASCII[95] = WORD | BLOCKS; // _
// Before a number, these make it part of something else: `#4111…` (an id), `$4111` (a price),
// `v10.0`, `a-123-45-6789`, `/123`, `x+555`.
for (const ch of '-./\\@#$%&+^~*') ASCII[ch.charCodeAt(0)] |= BLOCKS;

export function isDigit(c: number): boolean {
  return c >= 48 && c <= 57;
}
export function isUpper(c: number): boolean {
  return c >= 65 && c <= 90;
}
export function isAsciiAlnum(c: number): boolean {
  return c < 128 && (ASCII[c] & (DIGIT | UPPER | LOWER)) !== 0;
}
const NON_ASCII_WORD = /[\p{L}\p{N}\p{Sc}]/u;
/** Letters, digits, `_` (and non-ASCII letters/digits/currency): a number touching one is part of a word. */
export function isWordChar(c: number): boolean {
  if (c < 128) return (ASCII[c] & WORD) !== 0;
  return NON_ASCII_WORD.test(String.fromCharCode(c));
}
export function blocksBefore(c: number): boolean {
  if (c < 128) return (ASCII[c] & BLOCKS) !== 0;
  return NON_ASCII_WORD.test(String.fromCharCode(c));
}

/** May a candidate end just before index `j`? Not inside a word, path, address, time or decimal. */
export function endsCleanly(s: string, j: number): boolean {
  if (j >= s.length) return true;
  const c = s.charCodeAt(j);
  if (isWordChar(c) || c === 64 /* @ */ || c === 47 /* / */ || c === 92 /* \ */ || c === 37 /* % */) return false;
  if (j + 1 < s.length) {
    const next = s.charCodeAt(j + 1);
    // `…-1234-x` / `….5` continue a token; `4111,11` / `12:30` continue a number.
    if ((c === DASH || c === DOT) && isAsciiAlnum(next)) return false;
    if ((c === 44 /* , */ || c === 58) /* : */ && isDigit(next)) return false;
  }
  return true;
}

/** Skips the rest of a word-like token that starts or continues at `i` (`v10.0.19045`, a hash). */
export function skipToken(s: string, i: number): number {
  const n = s.length;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (isWordChar(c)) i++;
    else if ((c === DASH || c === DOT) && i + 1 < n && isAsciiAlnum(s.charCodeAt(i + 1))) i += 2;
    else break;
  }
  return i;
}
