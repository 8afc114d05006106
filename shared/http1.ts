// HTTP/1.1 framing facts shared by the agent's own HTTP/1.1 parts: the API listener
// (agent/server/http1/), the pod client (agent/forward/pod-client.ts) and the scrape connection
// (agent/telemetry/scrape-connection.ts). Each keeps its own head reader, since one parses
// requests, one relays owned chunks with backpressure and one lends views to a page parser;
// chunked bodies go through the one reader in shared/http1-chunked.ts.

export const CR = 13;
export const LF = 10;
/** The blank line that ends a message head. */
export const HEAD_END = Buffer.from('\r\n\r\n', 'latin1');
/** A header field name is a token (RFC 9110 5.6.2): nothing that would end, split or fold the line. */
export const FIELD_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** The hex digit's value, or -1. */
export function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  if (c >= 65 && c <= 70) return c - 55;
  return -1;
}

/** A chunk larger than this (16^8 - 1 bytes, 4 GiB) is refused rather than counted past safe integers. */
export const MAX_CHUNK_SIZE_DIGITS = 8;
