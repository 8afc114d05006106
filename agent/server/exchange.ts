// The seam between the listener and the request path: what the path needs of a client's request
// and of its answer, and nothing more. node:http's IncomingMessage implements it through
// `nodeRequest`, its ServerResponse as it is (it has every member below); tests can hand the path
// their own.
import type { IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import type { HeaderReader } from '../forward/headers.ts';
import { RequestError } from './request-error.ts';

export interface ApiRequest {
  readonly method: string;
  /** The request target as sent (path and query). */
  readonly url: string;
  readonly headers: HeaderReader;
  readonly remoteIp: string | undefined;
  /** The body, read once: rejects with a 413 RequestError past `limit`, a 499 if the client leaves first. */
  readBody(limit: number): Promise<Uint8Array>;
}

/** An answer being written: a head, then whole bytes or chunks as they come. */
export interface ApiResponse {
  readonly headersSent: boolean;
  /** The connection is gone (closed, reset, or destroyed here). */
  readonly destroyed: boolean;
  /** The whole answer was handed to the socket. */
  readonly writableFinished: boolean;
  writeHead(status: number, headers: Record<string, string>): this;
  /** One chunk of a body whose length the head did not give; false: wait for 'drain'. */
  write(chunk: Uint8Array | string): boolean;
  end(chunk?: Uint8Array | string): unknown;
  /** Drops the connection (a body that broke and cannot be ended properly). */
  destroy(error?: Error): unknown;
  /** 'drain': writing may go on; 'close': the answer is done or the connection gone (see writableFinished). */
  on(event: 'drain' | 'close', listener: () => void): this;
  off(event: 'drain' | 'close', listener: () => void): this;
  once(event: 'close', listener: () => void): this;
}

/** node:http's parsed headers read by (lowercase) name, repeated ones joined. */
export class NodeHeaders implements HeaderReader {
  readonly #raw: IncomingMessage['headers'];
  constructor(raw: IncomingMessage['headers']) {
    this.#raw = raw;
  }
  get(name: string): string | null {
    const value = this.#raw[name];
    return value === undefined ? null : Array.isArray(value) ? value.join(', ') : value;
  }
}

/** node:http's request as an ApiRequest (its body read from the socket stream). */
export function nodeRequest(incoming: IncomingMessage): ApiRequest {
  return {
    method: incoming.method ?? 'GET',
    url: incoming.url ?? '/',
    headers: new NodeHeaders(incoming.headers),
    remoteIp: incoming.socket.remoteAddress,
    readBody: (limit) => readStream(incoming, limit),
  };
}

export const tooLarge = (message: string) => new RequestError(413, message, null, 'body_too_large');
export const clientLeft = () =>
  new RequestError(499, 'client closed the request before its body ended', null, 'client_closed');

function readStream(incoming: Readable, limit: number): Promise<Uint8Array> {
  if (incoming.readableEnded) return Promise.resolve(new Uint8Array());
  return new Promise((resolve, reject) => {
    let chunks: Buffer[] | undefined = [];
    let total = 0;
    // The listeners stay until the request object is dropped (removing four listeners from a
    // stream cost more per request than the rest of the read): once settled, each is a no-op.
    const onData = (chunk: Buffer) => {
      if (chunks === undefined) return;
      total += chunk.length;
      if (total <= limit) return void chunks.push(chunk);
      // Stop keeping it; the rest flows on and is discarded, so the 413 still reaches the client.
      chunks = undefined;
      reject(tooLarge(`request body exceeds the limit of ${limit} bytes`));
    };
    const onEnd = () => {
      if (chunks === undefined) return;
      resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, total));
      chunks = undefined;
    };
    const onClose = () => {
      if (chunks === undefined) return;
      chunks = undefined;
      reject(clientLeft());
    };
    incoming.on('data', onData).on('end', onEnd).on('close', onClose).on('error', onClose);
  });
}
