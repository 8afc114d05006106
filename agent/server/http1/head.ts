// The API listener's request head, read strictly (RFC 9112), failing closed: this is the boundary
// every app in the cluster talks to, and whatever this parser accepts, a proxy in front of the agent
// may have read differently. Pure: text in, a head or the status and reason to refuse it out.
//
// Decisions (README "API", "HTTP/1.1 on the API listener"):
// - Lines end with CRLF. A bare LF or a bare CR anywhere in the head is refused (RFC 9112 2.2 lets a
//   recipient accept a lone LF; a parser that does and one that does not disagree on where a
//   header ends, which is what request smuggling is made of).
// - Empty lines before the request line are skipped (RFC 9112 2.2: clients send a CRLF after a body).
// - obs-fold (a header line starting with SP or HTAB) is refused, as is whitespace before a colon,
//   a name that is not a token, and a value with a control character (HTAB aside) or DEL.
// - Framing: Transfer-Encoding and Content-Length together are refused; several Content-Length
//   values must all be equal; Transfer-Encoding must be exactly `chunked` (anything else, or
//   chunked applied twice, cannot be framed here: 501 for a coding we do not know, 400 when chunked
//   is not the last); Transfer-Encoding in an HTTP/1.0 request is refused.
// - HTTP/1.1 needs exactly one Host; HTTP/1.0 and 1.1 are served, HTTP/2+ in this syntax gets 505.
// - The request target is kept as sent (origin-form expected; the route table refuses the rest with
//   404), limited to visible ASCII and `maxTargetBytes`; CONNECT is refused (501).
// - Expect: only `100-continue` (any other expectation gets 417).

import { hasToken, isTokenChar } from '../../../shared/http1.ts';

/** The limits a head is read under; each is a setting (README "Agent configuration"). */
export interface HeadLimits {
  /** Header lines at most. */
  maxHeaders: number;
  /** The request target's length at most (bytes). */
  maxTargetBytes: number;
}

export interface RequestHead {
  method: string;
  /** As sent: path and query. */
  target: string;
  /** 1 for HTTP/1.1, 0 for HTTP/1.0. */
  minor: 0 | 1;
  /** Field values by lowercase name; a repeated field's values joined with ", ". */
  fields: Record<string, string>;
  /** The connection may carry another request after this one's answer. */
  keepAlive: boolean;
  /** How the body is framed: its length (0: none), or chunked. */
  body: number | 'chunked';
  /** The client waits for `100 Continue` before sending its body. */
  expectContinue: boolean;
}

export interface HeadRefusal {
  status: number;
  message: string;
}

const refuse = (status: number, message: string): HeadRefusal => ({ status, message });

/** A field value's octet: VCHAR, obs-text, SP or HTAB (RFC 9110 5.5). */
const isFieldChar = (c: number) => (c >= 32 && c !== 127) || c === 9;

/** The head's text (latin1, each char one octet), up to and without the blank line that ends it. */
export function parseRequestHead(text: string, limits: HeadLimits): RequestHead | HeadRefusal {
  let i = 0;
  // Empty lines before the request line.
  while (text.charCodeAt(i) === 13 && text.charCodeAt(i + 1) === 10) i += 2;
  // method SP request-target SP HTTP-version CRLF
  const methodStart = i;
  while (i < text.length && isTokenChar(text.charCodeAt(i))) i++;
  if (i === methodStart || text.charCodeAt(i) !== 32) return refuse(400, 'malformed request line');
  const method = text.slice(methodStart, i);
  const targetStart = ++i;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c <= 32 || c >= 127) break;
    i++;
  }
  if (i === targetStart || text.charCodeAt(i) !== 32) return refuse(400, 'malformed request line');
  if (i - targetStart > limits.maxTargetBytes)
    return refuse(414, `request target longer than ${limits.maxTargetBytes} bytes`);
  const target = text.slice(targetStart, i);
  i++;
  if (!text.startsWith('HTTP/', i)) return refuse(400, 'malformed request line');
  const major = text.charCodeAt(i + 5) - 48;
  const minorDigit = text.charCodeAt(i + 7) - 48;
  if (
    major < 0 ||
    major > 9 ||
    text.charCodeAt(i + 6) !== 46 ||
    minorDigit < 0 ||
    minorDigit > 9 ||
    (i + 8 !== text.length && (text.charCodeAt(i + 8) !== 13 || text.charCodeAt(i + 9) !== 10))
  )
    return refuse(400, 'malformed request line');
  if (major !== 1 || minorDigit > 1) return refuse(505, `HTTP/${major}.${minorDigit} is not supported; use HTTP/1.1`);
  const minor = minorDigit as 0 | 1;
  if (method === 'CONNECT') return refuse(501, 'CONNECT is not supported');
  i += 10;

  const fields: Record<string, string> = Object.create(null) as Record<string, string>;
  let count = 0;
  let hosts = 0;
  let contentLength: number | undefined;
  let transferEncoding: string | undefined;
  let connection = '';
  while (i < text.length) {
    if (++count > limits.maxHeaders) return refuse(431, `more than ${limits.maxHeaders} header fields`);
    const nameStart = i;
    const first = text.charCodeAt(i);
    if (first === 32 || first === 9) return refuse(400, 'obsolete line folding is not accepted');
    while (i < text.length && isTokenChar(text.charCodeAt(i))) i++;
    if (i === nameStart || text.charCodeAt(i) !== 58) return refuse(400, 'malformed header field');
    const name = text.slice(nameStart, i).toLowerCase();
    i++;
    while (text.charCodeAt(i) === 32 || text.charCodeAt(i) === 9) i++;
    const valueStart = i;
    let valueEnd = i;
    for (;;) {
      if (i >= text.length) break;
      const c = text.charCodeAt(i);
      if (c === 13) {
        if (text.charCodeAt(i + 1) !== 10) return refuse(400, 'bare CR in a header field');
        break;
      }
      if (!isFieldChar(c)) return refuse(400, `invalid character in header field ${JSON.stringify(name)}`);
      i++;
      if (c !== 32 && c !== 9) valueEnd = i;
    }
    const value = text.slice(valueStart, valueEnd);
    i += 2;
    switch (name) {
      case 'host':
        hosts++;
        break;
      case 'content-length': {
        // The usual one plain length, read without the list's split and regex below.
        const plain = plainLength(value);
        if (plain >= 0) {
          if (contentLength !== undefined && contentLength !== plain) return refuse(400, 'conflicting Content-Length');
          contentLength = plain;
          break;
        }
        // Repeated or comma-listed lengths must agree (RFC 9110 8.6).
        for (const part of value.split(',')) {
          const digits = part.trim();
          if (!/^\d{1,15}$/.test(digits)) return refuse(400, 'invalid Content-Length');
          const n = Number(digits);
          if (contentLength !== undefined && contentLength !== n) return refuse(400, 'conflicting Content-Length');
          contentLength = n;
        }
        break;
      }
      case 'transfer-encoding':
        transferEncoding = transferEncoding === undefined ? value : `${transferEncoding}, ${value}`;
        break;
      case 'connection':
        connection += `,${value.toLowerCase()}`;
        break;
    }
    const before = fields[name];
    fields[name] = before === undefined ? value : `${before}, ${value}`;
  }
  if (minor === 1 && hosts !== 1) return refuse(400, hosts === 0 ? 'missing Host header' : 'more than one Host header');
  if (hosts > 1) return refuse(400, 'more than one Host header');

  let body: number | 'chunked' = contentLength ?? 0;
  if (transferEncoding !== undefined) {
    if (minor === 0) return refuse(400, 'Transfer-Encoding in an HTTP/1.0 request');
    if (contentLength !== undefined) return refuse(400, 'both Transfer-Encoding and Content-Length');
    const codings = transferEncoding.toLowerCase().split(',');
    const last = codings[codings.length - 1].trim();
    if (last !== 'chunked') return refuse(400, 'Transfer-Encoding must end with chunked');
    if (codings.length > 1) {
      const other = codings.slice(0, -1).map((c) => c.trim());
      return other.includes('chunked')
        ? refuse(400, 'chunked applied more than once')
        : refuse(501, `unsupported Transfer-Encoding ${JSON.stringify(transferEncoding.slice(0, 40))}`);
    }
    body = 'chunked';
  }

  let expectContinue = false;
  const expect = fields['expect'];
  if (expect !== undefined) {
    if (expect.toLowerCase() !== '100-continue')
      return refuse(417, `unsupported expectation ${JSON.stringify(expect)}`);
    expectContinue = minor === 1;
  }
  const keepAlive = minor === 1 ? !hasToken(connection, 'close') : hasToken(connection, 'keep-alive');
  return { method, target, minor, fields, keepAlive, body, expectContinue };
}

/** The value as a length when it is 1 to 15 digits and nothing else (what /^\d{1,15}$/ accepts), else -1. */
function plainLength(value: string): number {
  if (value.length === 0 || value.length > 15) return -1;
  let n = 0;
  for (let i = 0; i < value.length; i++) {
    const d = value.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return -1;
    n = n * 10 + d;
  }
  return n;
}
