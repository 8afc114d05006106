// Built-in PII detectors. Pure, allocation-light, one pass over the text.
//
// Shape first, then arithmetic: a candidate must look like the thing (grouping, separators, word
// boundaries) AND pass its check (Luhn + issuer prefix, mod-97 + country length, SSA rules), so
// order numbers, timestamps, versions, IPs, UUIDs and hashes stay untagged. A false positive here
// has a real cost: the request is kept off the providers for good.
//
// Cost: an indexOf('@') for e-mail, and one scan that only stops at digits (a regex jump over
// prose, a short probe in digit-dense text); each digit run is examined once and skipped past.
// bench/classify.bench.ts: a few µs for a 4 KB prompt. This file holds the scan and the digit
// chains (cards, SSNs, unmarked phones); e-mail (email.ts), marked phones (phone.ts), IBANs
// (iban.ts), normalisation (normalise.ts), character classes and separators (chars.ts) and
// checksums (checksums.ts) live beside it.
import {
  SPACE,
  PLUS,
  DASH,
  DOT,
  LPAREN,
  isDigit,
  isUpper,
  blocksBefore,
  endsCleanly,
  skipToken,
  isSpaceLike,
  looseSeparatorEnd,
} from './chars.ts';
import { knownIssuer, luhn } from './checksums.ts';
import { hasEmail } from './email.ts';
import { ibanAt } from './iban.ts';
import { forEachForm } from './decode.ts';
import { e164At, parenPhoneAt } from './phone.ts';

export type Detector = 'email' | 'card' | 'ssn' | 'iban' | 'phone';
export const DETECTORS: readonly Detector[] = ['email', 'card', 'ssn', 'iban', 'phone'];

/**
 * Which detectors fire on `text` in any of its forms (decode.ts); adds to `found` when given
 * (one set across a request's texts).
 */
export function detect(text: string, found: Set<Detector> = new Set()): Set<Detector> {
  forEachForm(text, (form) => scan(form, found));
  return found;
}

/** Which detectors fire on one form, already normalised. */
export function scan(s: string, found: Set<Detector>): void {
  if (s.indexOf('@') !== -1 && !found.has('email') && hasEmail(s)) found.add('email');
  scanDigits(s, found);
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
  // A negative number where JSON or a list puts one (`"card": -4111…`, `[-4111…`) is still the number.
  if (prev === DASH && (p === 1 || OPENS_NUMBER.has(s.charCodeAt(p - 2)))) return chainAt(s, p, found);
  if (p > 0 && blocksBefore(prev)) return skipToken(s, p);
  return chainAt(s, p, found);
}

const OPENS_NUMBER = new Set([...' \t\n\r:,[(='].map((ch) => ch.charCodeAt(0)));

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
      if (k === 3 && isSsn(s, a, a === 0 && k === count)) found.add('ssn');
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

function groupValue(s: string, k: number): number {
  let v = 0;
  for (let i = gStart[k], end = i + gLen[k]; i < end; i++) v = v * 10 + s.charCodeAt(i) - 48;
  return v;
}

/**
 * `AAA-GG-SSSS`: area not 000, 666 or 9xx; group not 00; serial not 0000. Written with spaces
 * or dots (`287 65 4321`, `287.65.4321`) only when those three groups are the whole number: a
 * longer list of numbers holds 3-2-4 runs by chance.
 */
function isSsn(s: string, a: number, whole: boolean): boolean {
  if (gLen[a] !== 3 || gLen[a + 1] !== 2 || gLen[a + 2] !== 4) return false;
  const sep = gSep[a];
  if (gSep[a + 1] !== sep || !(sep === DASH || (whole && (sep === SPACE || sep === DOT)))) return false;
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
