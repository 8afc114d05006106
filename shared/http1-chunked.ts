// A chunked body's framing (RFC 9112 7.1), the one reader for the agent's three HTTP/1.1 parts:
// request bodies on the API listener (agent/server/http1/body.ts), answers from pods
// (agent/forward/pod-client.ts) and metrics pages (agent/telemetry/scrape-connection.ts). Pure:
// it is fed a buffer range in pieces of any size, says which sub-ranges are body bytes, where the
// body ended, or why the framing is refused. Strict on every side (fail closed): every line ends
// with CRLF; a chunk's size has at most 8 hex digits; a chunk-size line (with its extensions) and
// the trailer section are bounded by `maxLineBytes`; extensions and trailer fields are read past,
// never interpreted, and a control character in them is refused.
import { CR, LF, MAX_CHUNK_SIZE_DIGITS, hexValue } from './http1.ts';

// Where the body being read is. Strings, not an enum: node runs this file as it is.
type ChunkedState =
  | 'size'
  | 'extension' // after `;` (or whitespace) on a chunk-size line, up to its CR
  | 'size-lf'
  | 'data'
  | 'data-cr'
  | 'data-lf'
  | 'trailer-start'
  | 'trailer-line'
  | 'trailer-cr'
  | 'trailer-lf'
  | 'ended';

export class ChunkedDecoder {
  #state: ChunkedState = 'size';
  /** Data bytes of the current chunk still to come, or its size as read so far. */
  #remaining = 0;
  #sizeDigits = 0;
  #lineBytes = 0;
  #trailerBytes = 0;
  readonly #maxLineBytes: number;

  constructor(maxLineBytes: number) {
    this.#maxLineBytes = maxLineBytes;
  }

  /** Starts a new body. */
  reset(): void {
    this.#trailerBytes = 0;
    this.#startChunk();
  }

  get ended(): boolean {
    return this.#state === 'ended';
  }

  /**
   * Reads buf[i, end): the body's data ranges [start, end) are appended to `segments`; returns the
   * index after the last byte of this body (bytes past it are not the body's) or, where it ended
   * earlier than `end`, that index; a string is why the framing is refused.
   */
  read(buf: Uint8Array, i: number, end: number, segments: number[]): number | string {
    while (i < end) {
      const state = this.#state;
      if (state === 'data') {
        const to = Math.min(end, i + this.#remaining);
        this.#remaining -= to - i;
        segments.push(i, to);
        i = to;
        if (this.#remaining === 0) this.#state = 'data-cr';
      } else if (state === 'ended') return i;
      else {
        const failure = this.#framingByte(buf[i++]);
        if (failure !== undefined) return failure;
      }
    }
    return i;
  }

  /** One byte of framing: size lines, the CRLF after data, trailers. */
  #framingByte(c: number): string | undefined {
    switch (this.#state) {
      case 'size': {
        const digit = hexValue(c);
        if (digit >= 0) {
          if (++this.#sizeDigits > MAX_CHUNK_SIZE_DIGITS) return 'chunk size too large';
          this.#remaining = this.#remaining * 16 + digit;
        } else if (this.#sizeDigits === 0) return 'invalid chunk size';
        else if (c === CR) this.#state = 'size-lf';
        else if (c === 59 /* ; */ || c === 32 || c === 9) this.#state = 'extension';
        else return 'invalid chunk size';
        return this.#countLine();
      }
      case 'extension':
        if (c === CR) this.#state = 'size-lf';
        else if ((c < 32 && c !== 9) || c === 127) return 'invalid character in a chunk extension';
        return this.#countLine();
      case 'size-lf':
        if (c !== LF) return 'chunk-size line not ended by CRLF';
        this.#state = this.#remaining === 0 ? 'trailer-start' : 'data';
        return undefined;
      case 'data-cr':
        if (c !== CR) return 'chunk data not followed by CRLF';
        this.#state = 'data-lf';
        return undefined;
      case 'data-lf':
        if (c !== LF) return 'chunk data not followed by CRLF';
        this.#startChunk();
        return undefined;
      case 'trailer-start':
        // The blank line ends the body; a line starting with whitespace would be an obsolete fold.
        if (c === CR) this.#state = 'trailer-lf';
        else if (c === LF) return 'chunked body not ended by CRLF';
        else if (c === 32 || c === 9) return 'malformed trailer section';
        else this.#state = 'trailer-line';
        return this.#countTrailer();
      case 'trailer-line':
        if (c === CR) this.#state = 'trailer-cr';
        else if ((c < 32 && c !== 9) || c === 127) return 'invalid character in a trailer field';
        return this.#countTrailer();
      case 'trailer-cr':
        if (c !== LF) return 'trailer line not ended by CRLF';
        this.#state = 'trailer-start';
        return this.#countTrailer();
      case 'trailer-lf':
        if (c !== LF) return 'chunked body not ended by CRLF';
        this.#state = 'ended';
        return undefined;
    }
    return undefined;
  }

  #countLine(): string | undefined {
    return ++this.#lineBytes > this.#maxLineBytes
      ? `chunk-size line longer than ${this.#maxLineBytes} bytes`
      : undefined;
  }

  #countTrailer(): string | undefined {
    return ++this.#trailerBytes > this.#maxLineBytes ? `trailers larger than ${this.#maxLineBytes} bytes` : undefined;
  }

  #startChunk(): void {
    this.#state = 'size';
    this.#remaining = 0;
    this.#sizeDigits = 0;
    this.#lineBytes = 0;
  }
}
