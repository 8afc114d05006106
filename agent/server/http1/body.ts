// A request body's framing: by ranges for Content-Length, through the shared chunked reader
// (shared/http1-chunked.ts: chunk-size lines, their extensions and the trailers bounded by
// `maxLineBytes`, a chunk's size by 8 hex digits, every line ended by CRLF) for chunked. Pure: it
// is fed a buffer range and says which sub-ranges are body bytes, where the body ended, or why
// the framing is refused.
import { ChunkedDecoder } from '../../../shared/http1-chunked.ts';

export class BodyFraming {
  /** Content-Length bytes still to come; unused when chunked. */
  #remaining: number;
  readonly #chunked: ChunkedDecoder | undefined;
  /** Body ranges [start, end) found by the last `read`. */
  readonly segments: number[] = [];

  constructor(framing: number | 'chunked', maxLineBytes: number) {
    if (framing === 'chunked') {
      this.#remaining = 0;
      this.#chunked = new ChunkedDecoder(maxLineBytes);
    } else this.#remaining = framing;
  }

  get ended(): boolean {
    return this.#chunked === undefined ? this.#remaining === 0 : this.#chunked.ended;
  }

  /**
   * Reads buf[i, end): body ranges go to `segments` (cleared first); returns the index after the
   * last byte of this body (bytes past it belong to the next request), or why the framing is refused.
   */
  read(buf: Uint8Array, i: number, end: number): number | string {
    const segments = this.segments;
    segments.length = 0;
    if (this.#chunked !== undefined) return this.#chunked.read(buf, i, end, segments);
    const to = Math.min(end, i + this.#remaining);
    this.#remaining -= to - i;
    if (to > i) segments.push(i, to);
    return to;
  }
}
