// HTTP/1.1 framing facts shared by the agent's own HTTP/1.1 parts: the API listener
// (agent/server/http1/), the pod client (agent/forward/pod-client.ts) and the scrape connection
// (agent/telemetry/scrape-connection.ts). Each keeps its own head reader, since one parses
// requests, one relays owned chunks with backpressure and one lends views to a page parser;
// chunked bodies go through the one reader in shared/http1-chunked.ts.

export const CR = 13;
export const LF = 10;
/** The blank line that ends a message head. */
export const HEAD_END = Buffer.from('\r\n\r\n', 'latin1');
// The two checks below run on every header of every message, on strings of a few dozen
// characters: a loop over char codes, not a regex (RegExp.prototype.test's own overhead was most
// of their cost, serial, on the request path).

/** tchar (RFC 9110 5.6.2) by char code. */
const TCHAR = new Uint8Array(128);
for (const c of "!#$%&'*+-.^_`|~") TCHAR[c.charCodeAt(0)] = 1;
for (let c = 48; c <= 57; c++) TCHAR[c] = 1;
for (let c = 65; c <= 90; c++) TCHAR[c] = 1;
for (let c = 97; c <= 122; c++) TCHAR[c] = 1;

/** A token's character (tchar), by char code. */
export const isTokenChar = (c: number): boolean => c < 128 && TCHAR[c] === 1;

/**
 * `text[start, end)` (the whole string by default) is a header field name: a non-empty token (RFC
 * 9110 5.6.2), nothing that would end, split or fold the line.
 */
export function isFieldName(text: string, start = 0, end = text.length): boolean {
  if (start >= end) return false;
  for (let i = start; i < end; i++) {
    const c = text.charCodeAt(i);
    if (c >= 128 || TCHAR[c] !== 1) return false;
  }
  return true;
}

/** Whether `text` holds CR, LF or NUL: what would end or split a header line if written into one. */
export function breaksLine(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 13 || c === 10 || c === 0) return true;
  }
  return false;
}

/** The hex digit's value, or -1. */
export function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  if (c >= 65 && c <= 70) return c - 55;
  return -1;
}

/** A chunk larger than this (16^8 - 1 bytes, 4 GiB) is refused rather than counted past safe integers. */
export const MAX_CHUNK_SIZE_DIGITS = 8;

/** Whether a comma-separated, lower-cased list (`,a, b,c`: a Connection header's tokens) holds `token`. */
export function hasToken(list: string, token: string): boolean {
  if (list === '') return false;
  for (const t of list.split(',')) if (t.trim() === token) return true;
  return false;
}
