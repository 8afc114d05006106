// The client's request as the request path sees it, straight from node:http: headers read from
// the parsed header object (no web Headers), an abort signal that fires when the client leaves
// before its answer is sent, and the socket stream its body is read from (once).
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HeaderReader } from '../forward/headers.ts';

export class ClientRequest {
  readonly incoming: IncomingMessage;
  readonly headers: HeaderReader;
  /** The path asked for, without the query. */
  readonly path: string;
  readonly remoteIp: string | undefined;
  readonly #left = new AbortController();

  constructor(incoming: IncomingMessage, res: ServerResponse) {
    this.incoming = incoming;
    const url = incoming.url ?? '/';
    const query = url.indexOf('?');
    this.path = query < 0 ? url : url.slice(0, query);
    this.remoteIp = incoming.socket.remoteAddress;
    const raw = incoming.headers;
    this.headers = {
      get: (name) => {
        const value = raw[name];
        return value === undefined ? null : Array.isArray(value) ? value.join(', ') : value;
      },
    };
    // 'close' before the answer finished: the client left (mid-body, waiting, or mid-stream).
    res.on('close', () => {
      if (!res.writableFinished) this.#left.abort(new Error('client disconnected'));
    });
  }

  /** Aborted when the client leaves before its answer is complete. */
  get signal(): AbortSignal {
    return this.#left.signal;
  }
}
