// A request body's framing, byte by byte where it must be (chunked) and by ranges where it can
// (Content-Length, chunk data). Pure: it is fed a buffer range and says which sub-ranges are body
// bytes, where the body ended, or why the framing is refused. The same grammar and limits as the
// pod client's reader (agent/forward/pod-client.ts, shared/http1.ts): chunk-size lines, their
// extensions and the trailers are bounded by `maxLineBytes`; a chunk's size by 8 hex digits; every
// line ends with CRLF.
import { CR, LF, MAX_CHUNK_SIZE_DIGITS, hexValue } from '../../../shared/http1.ts';

type State =
  | 'length'
  | 'chunk-size'
  | 'chunk-ext'
  | 'chunk-size-lf'
  | 'chunk-data'
  | 'chunk-data-cr'
  | 'chunk-data-lf'
  | 'trailer-start'
  | 'trailer-line'
  | 'trailer-cr'
  | 'trailer-lf'
  | 'ended';

export class BodyFraming {
  #state: State;
  #remaining = 0;
  #sizeDigits = 0;
  #lineBytes = 0;
  #trailerBytes = 0;
  readonly #maxLineBytes: number;
  /** Body ranges [start, end) found by the last `read`. */
  readonly segments: number[] = [];

  constructor(framing: number | 'chunked', maxLineBytes: number) {
    this.#maxLineBytes = maxLineBytes;
    if (framing === 'chunked') {
      this.#state = 'chunk-size';
    } else {
      this.#state = framing === 0 ? 'ended' : 'length';
      this.#remaining = framing;
    }
  }

  get ended(): boolean {
    return this.#state === 'ended';
  }

  /**
   * Reads buf[i, end): body ranges go to `segments` (cleared first); returns the index after the
   * last byte of this body (bytes past it belong to the next request), or why the framing is refused.
   */
  read(buf: Uint8Array, i: number, end: number): number | string {
    const segments = this.segments;
    segments.length = 0;
    while (i < end) {
      switch (this.#state) {
        case 'length':
        case 'chunk-data': {
          const to = Math.min(end, i + this.#remaining);
          this.#remaining -= to - i;
          segments.push(i, to);
          i = to;
          if (this.#remaining === 0) this.#state = this.#state === 'length' ? 'ended' : 'chunk-data-cr';
          break;
        }
        case 'ended':
          return i;
        default: {
          const failure = this.#framingByte(buf[i++]);
          if (failure !== undefined) return failure;
        }
      }
    }
    return i;
  }

  #framingByte(c: number): string | undefined {
    switch (this.#state) {
      case 'chunk-size': {
        const digit = hexValue(c);
        if (digit >= 0) {
          if (++this.#sizeDigits > MAX_CHUNK_SIZE_DIGITS) return 'chunk size too large';
          this.#remaining = this.#remaining * 16 + digit;
        } else if (this.#sizeDigits === 0) return 'invalid chunk size';
        else if (c === CR) this.#state = 'chunk-size-lf';
        else if (c === 59 /* ; */ || c === 32 || c === 9) this.#state = 'chunk-ext';
        else return 'invalid chunk size';
        return this.#countLine();
      }
      case 'chunk-ext':
        // Extensions are read past, not interpreted; a control character other than HTAB ends nothing well.
        if (c === CR) this.#state = 'chunk-size-lf';
        else if ((c < 32 && c !== 9) || c === 127) return 'invalid character in a chunk extension';
        return this.#countLine();
      case 'chunk-size-lf':
        if (c !== LF) return 'chunk-size line not ended by CRLF';
        if (this.#remaining === 0) this.#state = 'trailer-start';
        else this.#state = 'chunk-data';
        return undefined;
      case 'chunk-data-cr':
        if (c !== CR) return 'chunk data not followed by CRLF';
        this.#state = 'chunk-data-lf';
        return undefined;
      case 'chunk-data-lf':
        if (c !== LF) return 'chunk data not followed by CRLF';
        this.#state = 'chunk-size';
        this.#remaining = 0;
        this.#sizeDigits = 0;
        this.#lineBytes = 0;
        return undefined;
      case 'trailer-start':
        // A trailer field is read past (the agent uses none); the blank line ends the body.
        if (c === CR) this.#state = 'trailer-lf';
        else if (c === LF || c === 32 || c === 9) return 'malformed trailer section';
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
}
