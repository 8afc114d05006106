// The arithmetic a candidate must pass after its shape: Luhn and issuer prefixes for cards,
// mod 97 for IBANs. Pure.
import { isDigit } from './chars.ts';

export function luhn(digits: string): boolean {
  let sum = 0;
  let double = false;
  for (let i = digits.length - 1; i >= 0; i--) {
    let d = digits.charCodeAt(i) - 48;
    if (double) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    double = !double;
  }
  return sum % 10 === 0;
}

const MAESTRO = new Set([5018, 5020, 5038, 5893, 6304, 6759, 6761, 6762, 6763]);

/** Issuer identification number prefixes and the lengths each network issues. */
export function knownIssuer(d: string): boolean {
  const len = d.length;
  const p2 = Number(d.slice(0, 2));
  const p3 = Number(d.slice(0, 3));
  const p4 = Number(d.slice(0, 4));
  const long = len >= 16 && len <= 19;
  if (d.charCodeAt(0) === 52) return len === 13 || len === 16 || len === 19; // Visa
  if (p2 === 34 || p2 === 37) return len === 15; // American Express
  if ((p2 >= 51 && p2 <= 55) || (p4 >= 2221 && p4 <= 2720)) return len === 16; // Mastercard
  if (p4 >= 2200 && p4 <= 2204) return long; // Mir
  if (p4 === 6011 || (p3 >= 644 && p3 <= 649) || p2 === 65) return long; // Discover
  if (p4 >= 3528 && p4 <= 3589) return long; // JCB
  if (p2 === 62) return long; // UnionPay
  if (p2 === 36 || (p3 >= 300 && p3 <= 305)) return len >= 14 && len <= 19; // Diners Club
  if (p2 === 38 || p2 === 39) return long; // Diners Club (North America)
  if (MAESTRO.has(p4)) return len >= 13 && len <= 19;
  return false;
}

export function mod97(iban: string): number {
  const rearranged = iban.slice(4) + iban.slice(0, 4);
  let rem = 0;
  for (let i = 0; i < rearranged.length; i++) {
    const c = rearranged.charCodeAt(i);
    rem = isDigit(c) ? (rem * 10 + c - 48) % 97 : (rem * 100 + c - 55) % 97;
  }
  return rem;
}
