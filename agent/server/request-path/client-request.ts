// The client's request as the request path sees it, from either server (agent/server/exchange.ts):
// its headers, whether the client left before its answer was sent (a plain listener list: an
// AbortController and its EventTarget per request cost more than the rest of this object, and most
// requests never need one), and its body (read once).
import type { HeaderReader } from '../../forward/headers.ts';
import type { ClientPresence } from '../../forward/pod.ts';
import type { ApiRequest, ApiResponse } from '../exchange.ts';

export class ClientRequest implements ClientPresence {
  readonly incoming: ApiRequest;
  readonly headers: HeaderReader;
  /** The path asked for, without the query. */
  readonly path: string;
  readonly remoteIp: string | undefined;
  #left = false;
  #listeners: (() => void)[] | undefined;
  #controller: AbortController | undefined;

  constructor(incoming: ApiRequest, res: ApiResponse) {
    this.incoming = incoming;
    const url = incoming.url;
    const query = url.indexOf('?');
    this.path = query < 0 ? url : url.slice(0, query);
    this.remoteIp = incoming.remoteIp;
    this.headers = incoming.headers;
    // 'close' before the answer finished: the client left (mid-body, waiting, or mid-stream).
    res.on('close', () => {
      if (!res.writableFinished) this.#leave();
    });
  }

  #leave(): void {
    if (this.#left) return;
    this.#left = true;
    this.#controller?.abort(new Error('client disconnected'));
    const listeners = this.#listeners;
    this.#listeners = undefined;
    if (listeners) for (const listener of listeners) listener();
  }

  /** The client left before its answer was complete. */
  get aborted(): boolean {
    return this.#left;
  }

  /** Calls `listener` once when the client leaves before its answer is complete. */
  addEventListener(_type: 'abort', listener: () => void): void {
    if (this.#left) return;
    (this.#listeners ??= []).push(listener);
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    const listeners = this.#listeners;
    if (!listeners) return;
    const at = listeners.indexOf(listener);
    if (at >= 0) listeners.splice(at, 1);
  }

  /** Aborted when the client leaves before its answer is complete (made when first asked for). */
  get signal(): AbortSignal {
    if (!this.#controller) {
      this.#controller = new AbortController();
      if (this.#left) this.#controller.abort(new Error('client disconnected'));
    }
    return this.#controller.signal;
  }
}
