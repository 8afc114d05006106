// The forms a text is read in: as normalised (escapes undone, Unicode folded), then each encoding
// that ordinary tools put around a value, decoded where it occurs: URL escapes (`%40`), HTML
// entities (`&#64;`, `&commat;`), base64 and base64url spans (a JWT's payload, a header value an
// SDK encoded). Each form is named, so a finding can say which decoding it fired in. Pure.
import { isUtf8 } from 'node:buffer';
import { decodeHTML } from 'entities';
import { foldUnicode, normaliseWithEvidence } from './normalise.ts';

/** How a form was reached; `text` is the string as it came. */
export type Decoding = 'text' | 'json-escapes' | 'unicode' | 'url' | 'html' | 'base64';

/** Each form of `text` the detectors must read, with the decodings that produced it (never empty). */
export function forEachForm(text: string, visit: (form: string, via: readonly Decoding[]) => void): void {
  const n = normaliseWithEvidence(text);
  const base: Decoding[] = [];
  if (n.unescaped) base.push('json-escapes');
  if (n.folded) base.push('unicode');
  visit(n.text, base.length === 0 ? TEXT : base);
  const s = n.text;
  if (s.indexOf('%') !== -1 && PERCENT.test(s))
    visit(foldUnicode(s.replace(PERCENT_RUN, percentDecoded)), [...base, 'url']);
  if (s.indexOf('&') !== -1 && ENTITY.test(s)) visit(foldUnicode(decodeHTML(s)), [...base, 'html']);
  const decoded = base64Texts(s);
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
 * The shortest base64 span read: 9 bytes, so a dashed SSN (15 characters unpadded) and any
 * address of 9 characters or more are read; a 13-digit card takes 18. Runs of the standard and
 * URL-safe alphabets are both decoded (Node's decoder takes either); a JWT's three parts are
 * three runs, split at its dots.
 */
export const MIN_BASE64 = 12;
/** Both alphabets: `A-Z a-z 0-9 + /` and `- _`. A table lookup per character: a regex with a
 *  `{12,}` class repeat retries at every position and costs 40 times as much on prose. */
const BASE64_CHAR = new Uint8Array(128);
for (const ch of 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_')
  BASE64_CHAR[ch.charCodeAt(0)] = 1;
const LOWER_ONLY = /^[a-z]+$/;

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
    if (!isBase64Char(s.charCodeAt(i))) continue;
    let start = i;
    while (start > 0 && isBase64Char(s.charCodeAt(start - 1))) start--;
    let end = i + 1;
    while (end < n && isBase64Char(s.charCodeAt(end))) end++;
    // Resume at the first sampled index past this run.
    i = end - 1 - ((end - MIN_BASE64) % MIN_BASE64);
    if (end - start < MIN_BASE64) continue;
    const run = s.slice(start, end);
    // A run of lowercase letters only is a word (`internationalization`), not an encoding.
    if (LOWER_ONLY.test(run)) continue;
    // A run glued to a word (`idamFuZS…`, `key_eyJ…`) starts off the 4-character grid: each
    // alignment is tried until one decodes to text.
    for (let offset = 0; offset < 4 && run.length - offset >= MIN_BASE64; offset++) {
      const bytes = Buffer.from(offset === 0 ? run : run.slice(offset), 'base64');
      if (!looksLikeText(bytes)) continue;
      const text = normaliseWithEvidence(bytes.toString('utf8')).text;
      out = out === undefined ? text : `${out}\n${text}`;
      break;
    }
  }
  return out;
}

function isBase64Char(c: number): boolean {
  return c < 128 && BASE64_CHAR[c] === 1;
}

/** Valid UTF-8 without control characters (tab and line breaks aside): text, not random bytes. */
function looksLikeText(bytes: Uint8Array): boolean {
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i];
    if ((b < 32 && b !== 9 && b !== 10 && b !== 13) || b === 127) return false;
  }
  return isUtf8(bytes);
}
