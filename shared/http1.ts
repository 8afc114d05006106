// HTTP/1.1 framing facts shared by the agent's two own clients: the pod client
// (agent/forward/pod-client.ts) and the scrape connection (agent/telemetry/scrape-connection.ts).
// Each keeps its own reader, since one relays owned chunks with backpressure and the other lends
// views to a page parser; the grammar they check is this one.

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
