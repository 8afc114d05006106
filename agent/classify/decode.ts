// The forms a text is read in: as normalised (escapes undone, Unicode folded), then each encoding
// that ordinary tools put around a value, decoded where it occurs: URL escapes (`%40`), HTML
// entities (`&#64;`, `&commat;`), base64 and base64url spans (a JWT's payload, a header value an
// SDK encoded). Each form is named, so a finding can say which decoding it fired in. Pure.
import { decodeHTML } from 'entities';
import { foldUnicode, normaliseWithEvidence } from './normalise.ts';

/** How a form was reached; `text` is the string as it came. */
export type Decoding = 'text' | 'json-escapes' | 'unicode' | 'url' | 'html' | 'base64';

/**
 * Each form of `text` the detectors must read, with the decodings that produced it (never empty).
 * `reread`: the text is a window around a seam, each side of it already read whole with its base64
 * spans (a span split between two messages is not what a tool produces), so those are not decoded
 * again.
 */
export function forEachForm(
  text: string,
  visit: (form: string, via: readonly Decoding[]) => void,
  reread = false,
): void {
  const n = normaliseWithEvidence(text);
  const base: Decoding[] = [];
  if (n.unescaped) base.push('json-escapes');
  if (n.folded) base.push('unicode');
  visit(n.text, base.length === 0 ? TEXT : base);
  const s = n.text;
  if (s.indexOf('%') !== -1 && PERCENT.test(s))
    visit(foldUnicode(s.replace(PERCENT_RUN, percentDecoded)), [...base, 'url']);
  if (s.indexOf('&') !== -1 && ENTITY.test(s)) visit(foldUnicode(decodeHTML(s)), [...base, 'html']);
  const decoded = reread ? undefined : base64Texts(s);
  if (decoded !== undefined) visit(decoded, [...base, 'base64']);
}
const TEXT: readonly Decoding[] = ['text'];

// A `%XX` run is decoded as UTF-8 bytes (`%E2%80%8B` is one character); `+` stays a plus sign,
// as it is in an address (`bob+billing%40example.com`).
const PERCENT = /%[0-9A-Fa-f]{2}/;
const PERCENT_RUN = /(?:%[0-9A-Fa-f]{2})+/g;
function percentDecoded(run: string): string {
  return Buffer.from(run.replaceAll('%', ''), 'hex').toString('utf8');
}

// A numeric reference, or a name of two letters or more (`&lt;`, `&commat;`): `R&D`, `AT&T`
// and `a & b` do not pay for a decode.
const ENTITY = /&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});?/;

/**
 * The shortest base64 span read, `=` padding included: 10 bytes padded, 12 unpadded (base64url,
 * JWTs), so a padded address of 10 characters or more or dashed SSN, a card of 13 digits or more
 * and any JWT payload are read; an unpadded value under 12 bytes is not. Runs of the standard and URL-safe alphabets are both decoded
 * (Node's decoder takes either); a JWT's three parts are three runs, split at its dots.
 */
const MIN_BASE64 = 16;
/** Each character's 6-bit value in either alphabet (`+ /` standard, `- _` URL-safe), else -1. */
const BASE64_VALUE = new Int8Array(128).fill(-1);
[...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789'].forEach((ch, i) => {
  BASE64_VALUE[ch.charCodeAt(0)] = i;
});
BASE64_VALUE[43] = BASE64_VALUE[45] = 62; // + -
BASE64_VALUE[47] = BASE64_VALUE[95] = 63; // / _
const EQUALS = 61;

/**
 * The text inside the base64 spans of `s` that decode to text (joined by newlines, normalised),
 * or undefined. Spans that decode to binary (hashes, ids, keys, long identifiers) are not
 * text a model reads and are passed over; a whole string that is one long blob is tagged
 * `unscanned` by the walker before it gets here.
 */
function base64Texts(s: string): string | undefined {
  let out: string | undefined;
  const n = s.length;
  // Any run of MIN_BASE64 characters covers one index ≡ MIN_BASE64-1 (mod MIN_BASE64): only
  // those are looked at, and the run around each grown both ways. Prose costs a short word's
  // length per MIN_BASE64 characters.
  for (let i = MIN_BASE64 - 1; i < n; i += MIN_BASE64) {
    let p = i;
    let c = s.charCodeAt(p);
    // On padding: the run is the one it ends.
    while (c === EQUALS && p > 0 && p > i - 2) c = s.charCodeAt(--p);
    if (c >= 128 || BASE64_VALUE[c] < 0) continue;
    // A run of lowercase letters only is a word (`internationalization`), not an encoding.
    let lowerOnly = c >= 97 && c <= 122;
    let start = p;
    while (start > 0 && (c = s.charCodeAt(start - 1)) < 128 && BASE64_VALUE[c] >= 0) {
      if (c < 97 || c > 122) lowerOnly = false;
      start--;
    }
    let end = p + 1;
    while (end < n && (c = s.charCodeAt(end)) < 128 && BASE64_VALUE[c] >= 0) {
      if (c < 97 || c > 122) lowerOnly = false;
      end++;
    }
    let padding = 0;
    while (padding < 2 && s.charCodeAt(end + padding) === EQUALS) padding++;
    // Resume at the first sampled index past this run and its padding.
    const last = end + padding - 1;
    if (last > i) i = last - ((last - (MIN_BASE64 - 1)) % MIN_BASE64);
    if (end - start + padding < MIN_BASE64 || lowerOnly) continue;
    // A run glued to a word (`idamFuZS…`, `key_eyJ…`) starts off the 4-character grid: each
    // alignment is tried until one decodes to text.
    for (let from = start; from < start + 4 && end - from + padding >= MIN_BASE64; from++) {
      const bytes = textBytes(s, from, end);
      if (bytes === 0) continue;
      const text = normaliseWithEvidence(Buffer.from(scratch.buffer, 0, bytes).toString('utf8')).text;
      out = out === undefined ? text : `${out}\n${text}`;
      break;
    }
  }
  return out;
}

let scratch = new Uint8Array(1024);

/**
 * Decodes `s[from, to)` as base64 into `scratch` while checking that the bytes are text (UTF-8,
 * no control characters but tab and line breaks): their count, or 0 at the first byte that is
 * not. Binary gives itself away within a few bytes, so a hash or an id costs almost nothing and
 * allocates nothing. A sequence cut by the span's end is dropped.
 */
function textBytes(s: string, from: number, to: number): number {
  const capacity = Math.ceil(((to - from) * 3) / 4);
  if (scratch.length < capacity) scratch = new Uint8Array(capacity);
  let count = 0;
  let complete = 0;
  let pending = 0; // UTF-8 continuation bytes still expected
  let acc = 0;
  let bits = 0;
  for (let i = from; i < to; i++) {
    acc = ((acc << 6) | BASE64_VALUE[s.charCodeAt(i)]) & 0xffffff;
    bits += 6;
    if (bits < 8) continue;
    bits -= 8;
    const b = (acc >> bits) & 0xff;
    if (pending > 0) {
      if ((b & 0xc0) !== 0x80) return 0;
      pending--;
    } else if (b < 0x80) {
      if ((b < 32 && b !== 9 && b !== 10 && b !== 13) || b === 127) return 0;
    } else if (b >= 0xc2 && b <= 0xdf) pending = 1;
    else if (b >= 0xe0 && b <= 0xef) pending = 2;
    else if (b >= 0xf0 && b <= 0xf4) pending = 3;
    else return 0;
    scratch[count++] = b;
    if (pending === 0) complete = count;
  }
  return complete;
}
