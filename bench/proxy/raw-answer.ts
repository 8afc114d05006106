// Reading one HTTP/1.1 answer off a raw kept-alive socket, for the benches that time requests
// without an HTTP client in the way (load.ts, serial.ts). Only what the benches' upstreams send:
// a Content-Length body, or a chunked one that ends with the last chunk.

const HEAD_END = Buffer.from('\r\n\r\n');
const CHUNKED_END = Buffer.from('\r\n0\r\n\r\n');

export interface RawAnswer {
  /** The status line was `HTTP/1.1 200`. */
  ok: boolean;
  /** performance.now() at the first body byte (the end when the body was empty). */
  firstByte: number;
  /** performance.now() when the whole answer was in. */
  end: number;
}

/** A 'data' listener that gathers one answer and calls `done` once, when all of it is in. */
export function answerReader(done: (answer: RawAnswer) => void): (d: Buffer) => void {
  let buf: Buffer = Buffer.alloc(0);
  let headEnd = -1;
  let length: number | undefined;
  let firstByte: number | undefined;
  let ok = false;
  return (d) => {
    buf = buf.length === 0 ? d : Buffer.concat([buf, d]);
    if (headEnd < 0) {
      headEnd = buf.indexOf(HEAD_END);
      if (headEnd < 0) return;
      const head = buf.toString('latin1', 0, headEnd);
      ok = head.startsWith('HTTP/1.1 200');
      const m = /\r\ncontent-length:\s*(\d+)/i.exec(head);
      length = m ? Number(m[1]) : undefined;
    }
    if (firstByte === undefined && buf.length > headEnd + 4) firstByte = performance.now();
    const complete =
      length !== undefined
        ? buf.length >= headEnd + 4 + length
        : buf.length >= CHUNKED_END.length && buf.subarray(buf.length - CHUNKED_END.length).equals(CHUNKED_END);
    if (!complete) return;
    const end = performance.now();
    done({ ok, firstByte: firstByte ?? end, end });
  };
}
