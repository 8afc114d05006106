// Drain accounting for the API listener: how many requests are still open, and the shutdown
// sequence that lets them finish up to a deadline before the sockets close.
import type { ApiResponse } from '../exchange.ts';

/** What the drain needs of the API listener's server (node:http's, agent/server/listener/listener.ts). */
export interface DrainableServer {
  on(event: 'request', listener: (req: unknown, res: ApiResponse) => void): unknown;
  close(): void;
  closeIdleConnections(): void;
  closeAllConnections(): void;
}

/** After the drain deadline, how long the closing error events get to reach their clients. */
export const DRAIN_FLUSH_MS = 1_000;

export class Drain {
  #draining = false;
  #active = 0;
  #received = 0;
  #waiters: (() => void)[] = [];

  /** Counts the server's requests until their responses close. */
  track(server: DrainableServer): void {
    // One function for every response: 'close' comes once, so no once-wrapper to make and remove per request.
    const closed = () => {
      this.#active--;
      if (this.#active === 0) for (const done of this.#waiters.splice(0)) done();
    };
    server.on('request', (_req, res) => {
      this.#active++;
      this.#received++;
      res.on('close', closed);
    });
  }

  get draining(): boolean {
    return this.#draining;
  }

  get active(): number {
    return this.#active;
  }

  /** Requests received since the start (agent/memory/idle-release.ts: when the agent turned quiet). */
  get received(): number {
    return this.#received;
  }

  /** Resolves when no request is open, or after `ms`. */
  settled(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      if (this.#active === 0) return resolve();
      const timer = setTimeout(resolve, ms);
      this.#waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /**
   * Stops accepting, waits up to `timeoutMs` for open requests, then calls `endStreams` so the
   * streams still running end with an error event and [DONE] rather than a cut socket, gives
   * them a moment to reach their clients, and closes every connection.
   */
  async drain(server: DrainableServer, timeoutMs: number, endStreams: () => void): Promise<void> {
    this.#draining = true;
    // Idle keep-alive connections close now, busy ones after their response.
    server.close();
    server.closeIdleConnections();
    await this.settled(timeoutMs);
    if (this.#active > 0) {
      endStreams();
      await this.settled(DRAIN_FLUSH_MS);
    }
    server.closeAllConnections();
  }
}
