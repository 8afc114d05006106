// Built-in PII detectors. Pure, allocation-light, one pass over the text.
//
// Shape first, then arithmetic: a candidate must look like the thing (grouping, separators, word
// boundaries) AND pass its check (Luhn + issuer prefix, mod-97 + country length, SSA rules), so
// order numbers, timestamps, versions, IPs, UUIDs and hashes stay untagged. A false positive here
// has a real cost: the request is kept off the providers for good.
//
// Cost: an indexOf('@') for e-mail, and one scan that only stops at digits (a regex jump over
// prose, a short probe in digit-dense text); each digit run is examined once and skipped past.
// bench/classify.bench.ts: a few µs for a 4 KB prompt. Normalisation (normalise.ts), character
// classes (chars.ts) and checksums (checksums.ts) live beside it.
import {
  SPACE,
  PLUS,
  DASH,
  DOT,
  LPAREN,
  RPAREN,
  isDigit,
  isUpper,
  isAsciiAlnum,
  isWordChar,
  blocksBefore,
  endsCleanly,
  skipToken,
} from './chars.ts';
import { knownIssuer, luhn, mod97 } from './checksums.ts';
import { normalise } from './normalise.ts';

export type Detector = 'email' | 'card' | 'ssn' | 'iban' | 'phone';
export const DETECTORS: readonly Detector[] = ['email', 'card', 'ssn', 'iban', 'phone'];

/** Which detectors fire on `text`; adds to `found` when given (one set across a request's texts). */
export function detect(text: string, found: Set<Detector> = new Set()): Set<Detector> {
  const s = normalise(text);
  if (s.indexOf('@') !== -1 && !found.has('email') && hasEmail(s)) found.add('email');
  scanDigits(s, found);
  return found;
}

// ---------------------------------------------------------------------------------------------
// e-mail

const LOCAL_EXTRA = new Set([...'._%+-'].map((ch) => ch.charCodeAt(0)));
/** TLD-shaped file extensions: `icon@2x.png` is an asset, not an address. */
const FILE_EXTENSIONS = new Set([
  'png',
  'jpg',
  'jpeg',
  'gif',
  'svg',
  'webp',
  'bmp',
  'ico',
  'tif',
  'tiff',
  'pdf',
  'js',
  'mjs',
  'ts',
  'tsx',
  'jsx',
  'css',
  'json',
  'yaml',
  'yml',
  'lock',
  'txt',
  'html',
  'htm',
  'map',
]);

/** Internationalised addresses (RFC 6531) put letters of any script on both sides of the `@`. */
function isLabelChar(c: number): boolean {
  return isAsciiAlnum(c) || (c >= 128 && isWordChar(c));
}
const TLD = /^(?:\p{L}{2,24}|xn--[a-z0-9-]{2,59})$/iu;

function hasEmail(s: string): boolean {
  const n = s.length;
  for (let at = s.indexOf('@'); at !== -1; at = s.indexOf('@', at + 1)) {
    let l = at;
    while (l > 0) {
      const c = s.charCodeAt(l - 1);
      if (isLabelChar(c) || LOCAL_EXTRA.has(c)) l--;
      else break;
    }
    while (l < at && s.charCodeAt(l) === DOT) l++;
    if (l === at) continue;
    // Domain: labels of letters, digits and `-` joined by single dots; the last one all letters (or punycode).
    let r = at + 1;
    let lastDot = -1;
    while (r < n) {
      const c = s.charCodeAt(r);
      if (isLabelChar(c) || (c === DASH && r > at + 1 && s.charCodeAt(r - 1) !== DOT)) r++;
      else if (
        c === DOT &&
        r > at + 1 &&
        s.charCodeAt(r - 1) !== DOT &&
        r + 1 < n &&
        isLabelChar(s.charCodeAt(r + 1))
      ) {
        lastDot = r;
        r++;
      } else break;
    }
    if (lastDot === -1) continue;
    const tld = s.slice(lastDot + 1, r);
    if (!TLD.test(tld)) continue;
    if (FILE_EXTENSIONS.has(tld.toLowerCase()) || /^[0-9.]+x$/i.test(s.slice(at + 1, s.indexOf('.', at + 1)))) continue;
    const next = r < n ? s.charCodeAt(r) : SPACE;
    // `git@github.com:org/repo.git` is a remote, not a mailbox.
    if (next === 64 || next === 95 || (next === 58 && r + 1 < n && isAsciiAlnum(s.charCodeAt(r + 1)))) continue;
    return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// digits: one loop, dispatching on what precedes each digit run

// The irregexp engine finds the next digit far faster than a charCodeAt loop over prose (and
// flattens a rope string for the loops below); `test` on a global regex moves lastIndex without
// allocating. In digit-dense text the next digit is usually a few characters on, where a short
// probe is cheaper than another regex call.
const NEXT_DIGIT = /[0-9]/g;
const PROBE = 12;

function scanDigits(s: string, found: Set<Detector>): void {
  const n = s.length;
  NEXT_DIGIT.lastIndex = 0;
  if (!NEXT_DIGIT.test(s)) return;
  let i = atDigit(s, NEXT_DIGIT.lastIndex - 1, found);
  while (i < n) {
    const limit = Math.min(n, i + PROBE);
    while (i < limit && !isDigit(s.charCodeAt(i))) i++;
    if (i < limit) {
      i = atDigit(s, i, found);
      continue;
    }
    NEXT_DIGIT.lastIndex = i;
    if (!NEXT_DIGIT.test(s)) return;
    i = atDigit(s, NEXT_DIGIT.lastIndex - 1, found);
  }
}

/** Examines the number starting at `p`; returns the index to continue from (> p). */
function atDigit(s: string, p: number, found: Set<Detector>): number {
  const prev = p > 0 ? s.charCodeAt(p - 1) : SPACE;
  if (p >= 2 && isUpper(prev) && isUpper(s.charCodeAt(p - 2)) && (p === 2 || !blocksBefore(s.charCodeAt(p - 3)))) {
    const end = ibanAt(s, p - 2);
    if (end > 0) {
      found.add('iban');
      return end;
    }
  }
  if (prev === PLUS) {
    if (p === 1 || !blocksBefore(s.charCodeAt(p - 2))) {
      const end = e164At(s, p);
      if (end > 0) {
        found.add('phone');
        return end;
      }
    }
    return skipToken(s, p);
  }
  if (prev === LPAREN && (p === 1 || !blocksBefore(s.charCodeAt(p - 2)))) {
    const end = parenPhoneAt(s, p);
    if (end > 0) {
      found.add('phone');
      return end;
    }
  }
  if (p > 0 && blocksBefore(prev)) return skipToken(s, p);
  return chainAt(s, p, found);
}

// A chain: digit groups joined by single spaces, dashes or dots (`4111 1111 1111 1111`,
// `123-45-6789`, `555.123.4567`). Candidates are windows of consecutive groups whose outer
// edges are a space or the chain's clean ends, so `4111 1111 1111 1111 12/26` still finds the
// card while `4111-1111-1111-1111-9` (a longer dashed id) does not.

const MAX_GROUPS = 32;
/** A separator that is not one plain character: a newline, a tab, double spaces, ` - `. */
const LOOSE = 1;
const gStart = new Int32Array(MAX_GROUPS);
const gLen = new Int32Array(MAX_GROUPS);
const gSep = new Int32Array(MAX_GROUPS); // separator after group k

function chainAt(s: string, p: number, found: Set<Detector>): number {
  const n = s.length;
  let count = 0;
  let digits = 0;
  let j = p;
  while (true) {
    const start = j;
    while (j < n && isDigit(s.charCodeAt(j))) j++;
    gStart[count] = start;
    gLen[count] = j - start;
    gSep[count] = 0;
    digits += j - start;
    count++;
    if (count === MAX_GROUPS || j + 1 >= n) break;
    const c = s.charCodeAt(j);
    if ((c === SPACE || c === DASH || c === DOT) && isDigit(s.charCodeAt(j + 1))) {
      gSep[count - 1] = c;
      j++;
    } else if (
      c !== SPACE
        ? isSpaceLike(c)
        : j + 1 < n && (isSpaceLike(s.charCodeAt(j + 1)) || s.charCodeAt(j + 1) === DASH || s.charCodeAt(j + 1) === DOT)
    ) {
      // Checked inline first: a number followed by one space and a word is the common case.
      // Only card-shaped groups (4, or Amex's 6) continue across a line break or double space:
      // a log line's trailing number must not chain into the next line's timestamp.
      const width = j - start;
      if (width !== 4 && width !== 6) break;
      const next = looseSeparatorEnd(s, j);
      if (next === -1) break;
      gSep[count - 1] = LOOSE;
      j = next;
    } else break;
  }
  if (digits < 9) return j; // the shortest candidate, an SSN, has 9 digits
  const cleanEnd = endsCleanly(s, j);
  for (let a = 0; a < count; a++) {
    if (a > 0 && !isBreak(gSep[a - 1])) continue;
    let windowDigits = 0;
    for (let b = a; b < count && b - a < 5; b++) {
      windowDigits += gLen[b];
      if (windowDigits > 19) break;
      const rightOk = b === count - 1 ? cleanEnd : isBreak(gSep[b]);
      if (!rightOk) continue;
      const k = b - a + 1;
      if (k === 3 && isSsn(s, a)) found.add('ssn');
      else if ((k === 3 || k === 4) && isNanp(s, a, k)) found.add('phone');
      // A national number stands alone: the whole chain, not four digits inside a longer one.
      else if (
        a === 0 &&
        k === count &&
        k >= 2 &&
        (windowDigits === 10 || windowDigits === 11) &&
        isNationalPhone(s, a, k)
      )
        found.add('phone');
      else if (windowDigits >= 13 && isCard(s, a, k, windowDigits)) found.add('card');
    }
  }
  return j;
}

function isBreak(sep: number): boolean {
  return sep === SPACE || sep === LOOSE;
}

const isSpaceLike = (c: number) => c === SPACE || c === 9 || c === 10 || c === 13;

/**
 * A run of 2–3 characters of whitespace with at most one `-` or `.`, or a lone tab/newline,
 * followed by a digit: the index of that digit, else -1. Numbers typed across lines or with
 * double spaces still group.
 */
function looseSeparatorEnd(s: string, j: number): number {
  const n = s.length;
  let k = j;
  let marks = 0;
  let spaces = 0;
  while (k < n && k - j < 3) {
    const c = s.charCodeAt(k);
    if (isSpaceLike(c)) spaces++;
    else if ((c === DASH || c === DOT) && marks === 0) marks++;
    else break;
    k++;
  }
  if (spaces === 0 || (k === j + 1 && s.charCodeAt(j) === SPACE)) return -1;
  return k < n && isDigit(s.charCodeAt(k)) ? k : -1;
}

function groupValue(s: string, k: number): number {
  let v = 0;
  for (let i = gStart[k], end = i + gLen[k]; i < end; i++) v = v * 10 + s.charCodeAt(i) - 48;
  return v;
}

/** `AAA-GG-SSSS`: area not 000, 666 or 9xx; group not 00; serial not 0000. */
function isSsn(s: string, a: number): boolean {
  if (gLen[a] !== 3 || gLen[a + 1] !== 2 || gLen[a + 2] !== 4 || gSep[a] !== DASH || gSep[a + 1] !== DASH) return false;
  const area = groupValue(s, a);
  return area !== 0 && area !== 666 && area < 900 && groupValue(s, a + 1) !== 0 && groupValue(s, a + 2) !== 0;
}

/** `555-123-4567`, `555.123.4567`, `1-555-123-4567`: one separator kind (- or .), area code 2xx–9xx. */
function isNanp(s: string, a: number, k: number): boolean {
  const sep = gSep[a];
  if (sep !== DASH && sep !== DOT) return false;
  for (let i = a; i < a + k - 1; i++) if (gSep[i] !== sep) return false;
  let area = a;
  if (k === 4) {
    if (gLen[a] !== 1 || s.charCodeAt(gStart[a]) !== 49) return false;
    area = a + 1;
  }
  return gLen[area] === 3 && gLen[area + 1] === 3 && gLen[area + 2] === 4 && s.charCodeAt(gStart[area]) >= 50;
}

/**
 * National numbers with a trunk prefix, as Europe and Australia write them: `020 7946 0958`,
 * `01 23 45 67 89`, `030-12345678`, `0412 345 678`. 10–11 digits, the first group `0` then a
 * non-zero digit, one separator kind.
 */
function isNationalPhone(s: string, a: number, k: number): boolean {
  if (k > 5 || gLen[a] < 2 || gLen[a] > 5) return false;
  if (s.charCodeAt(gStart[a]) !== 48 || s.charCodeAt(gStart[a] + 1) === 48) return false;
  const sep = gSep[a];
  // Pairs all the way (`01 23 45 67 89`), or every group after the prefix at least 3 digits
  // (`020 7946 0958`, `0412 345 678`): `0123-4567-89` is a part number, not a phone.
  const pairs = k === 5;
  for (let i = a; i < a + k; i++) {
    if (pairs ? gLen[i] !== 2 : i > a && gLen[i] < 3) return false;
    if (i < a + k - 1 && gSep[i] !== sep) return false;
  }
  return sep === SPACE || sep === DASH || sep === DOT;
}

/**
 * 13–19 digits, unbroken or grouped 4-4-4-4(-n) / 4-6-5 / 4-6-4 by spaces, dashes, dots or line
 * breaks; known issuer; Luhn. The checksum, not the separators, keeps ids from matching.
 */
function isCard(s: string, a: number, k: number, total: number): boolean {
  if (k > 1) {
    const amexLike = k === 3 && gLen[a] === 4 && gLen[a + 1] === 6 && (gLen[a + 2] === 5 || gLen[a + 2] === 4);
    if (!amexLike) {
      if (k < 4) return false;
      for (let i = a; i < a + k - 1; i++) if (gLen[i] !== 4) return false;
    }
  }
  let digits = '';
  for (let i = a; i < a + k; i++) digits += s.slice(gStart[i], gStart[i] + gLen[i]);
  return total === digits.length && knownIssuer(digits) && luhn(digits);
}

// ---------------------------------------------------------------------------------------------
// phone numbers with explicit markers

/** `+` then a country code and 8–15 digits in all, groups joined by one of ` -.` and/or a paren. */
function e164At(s: string, p: number): number {
  if (s.charCodeAt(p) === 48) return -1; // no country code starts with 0
  const n = s.length;
  let j = p;
  let digits = 0;
  let groups = 0;
  let singles = 0;
  while (true) {
    const start = j;
    while (j < n && isDigit(s.charCodeAt(j))) j++;
    digits += j - start;
    if (groups > 0 && j - start === 1) singles++;
    groups++;
    if (digits > 15) return -1;
    // Separator: at most one of ` -.` and one paren, e.g. `) `, ` (`, `-`.
    let k = j;
    let plain = 0;
    let paren = 0;
    while (k < n && k - j < 2) {
      const c = s.charCodeAt(k);
      if ((c === SPACE || c === DASH || c === DOT) && plain === 0) plain++;
      else if ((c === LPAREN || c === RPAREN) && paren === 0) paren++;
      else break;
      k++;
    }
    if (k > j && k < n && isDigit(s.charCodeAt(k))) j = k;
    else break;
  }
  // `x +1 2 3 4 5 6 7 8` is arithmetic; real numbers have at most one 1-digit group after the country code.
  if (digits < 8 || singles > 1) return -1;
  if (s.charCodeAt(j) === RPAREN) j++;
  return endsCleanly(s, j) ? j : -1;
}

/** `(555) 123-4567`, `(555)123-4567`, `(555) 123.4567`; area code 2xx–9xx. */
function parenPhoneAt(s: string, p: number): number {
  const n = s.length;
  if (p + 12 > n || s.charCodeAt(p) < 50) return -1;
  for (let i = p; i < p + 3; i++) if (!isDigit(s.charCodeAt(i))) return -1;
  if (s.charCodeAt(p + 3) !== RPAREN) return -1;
  let j = p + 4;
  if (s.charCodeAt(j) === SPACE) j++;
  for (let i = j; i < j + 3; i++) if (!isDigit(s.charCodeAt(i))) return -1;
  const sep = s.charCodeAt(j + 3);
  if (sep !== DASH && sep !== DOT && sep !== SPACE) return -1;
  for (let i = j + 4; i < j + 8; i++) if (!isDigit(s.charCodeAt(i))) return -1;
  return endsCleanly(s, j + 8) ? j + 8 : -1;
}

// ---------------------------------------------------------------------------------------------
// IBAN

/** IBAN lengths of the countries that issue them most (SWIFT registry); others are not tagged. */
const IBAN_LENGTH: Record<string, number> = {
  AD: 24,
  AE: 23,
  AL: 28,
  AT: 20,
  AZ: 28,
  BA: 20,
  BE: 16,
  BG: 22,
  BH: 22,
  BR: 29,
  BY: 28,
  CH: 21,
  CR: 22,
  CY: 28,
  CZ: 24,
  DE: 22,
  DK: 18,
  DO: 28,
  EE: 20,
  EG: 29,
  ES: 24,
  FI: 18,
  FO: 18,
  FR: 27,
  GB: 22,
  GE: 22,
  GI: 23,
  GL: 18,
  GR: 27,
  GT: 28,
  HR: 21,
  HU: 28,
  IE: 22,
  IL: 23,
  IQ: 23,
  IS: 26,
  IT: 27,
  JO: 30,
  KW: 30,
  KZ: 20,
  LB: 28,
  LC: 32,
  LI: 21,
  LT: 20,
  LU: 20,
  LV: 21,
  MC: 27,
  MD: 24,
  ME: 22,
  MK: 19,
  MR: 27,
  MT: 31,
  MU: 30,
  NL: 18,
  NO: 15,
  PK: 24,
  PL: 28,
  PS: 29,
  PT: 25,
  QA: 29,
  RO: 24,
  RS: 22,
  SA: 24,
  SC: 31,
  SE: 24,
  SI: 19,
  SK: 24,
  SM: 27,
  ST: 25,
  SV: 28,
  TL: 23,
  TN: 24,
  TR: 26,
  UA: 29,
  VA: 22,
  VG: 24,
  XK: 20,
};

/** Country + 2 check digits + BBAN, compact or in groups of 4 (any separator); exact length; mod 97 = 1. */
function ibanAt(s: string, start: number): number {
  const length = IBAN_LENGTH[s.slice(start, start + 2)];
  if (length === undefined || !isDigit(s.charCodeAt(start + 3))) return -1;
  const n = s.length;
  let compact = '';
  let j = start;
  while (compact.length < length && j < n) {
    const c = s.charCodeAt(j);
    if (isDigit(c) || isUpper(c)) {
      compact += s[j];
      j++;
    } else if (
      compact.length % 4 === 0 &&
      (c === SPACE || c === DASH || c === DOT) &&
      j + 1 < n &&
      isAsciiAlnum(s.charCodeAt(j + 1))
    ) {
      j++;
    } else if (compact.length % 4 === 0 && isSpaceLike(c)) {
      const next = looseSeparatorEnd(s, j);
      if (next === -1) break;
      j = next;
    } else break;
  }
  if (compact.length !== length || !endsCleanly(s, j)) return -1;
  return mod97(compact) === 1 ? j : -1;
}
