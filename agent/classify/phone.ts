// Phone numbers that announce themselves with a marker (`+` or a parenthesised area code), so
// their shape alone is evidence; unmarked ones are matched as digit chains in detect.ts. Pure.
import { SPACE, DASH, DOT, LPAREN, RPAREN, isDigit, endsCleanly } from './chars.ts';

/** `+` then a country code and 8–15 digits in all, groups joined by one of ` -.` and/or a paren. */
export function e164At(s: string, p: number): number {
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
export function parenPhoneAt(s: string, p: number): number {
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
