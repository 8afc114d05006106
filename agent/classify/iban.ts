// IBANs: they open with a two-letter country code, so detect.ts calls here when two capitals
// precede a digit. Pure.
import {
  SPACE,
  DASH,
  DOT,
  isDigit,
  isUpper,
  isAsciiAlnum,
  isSpaceLike,
  endsCleanly,
  looseSeparatorEnd,
} from './chars.ts';
import { mod97 } from './checksums.ts';

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
export function ibanAt(s: string, start: number): number {
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
