// Giving back the memory a burst of requests needed, once the burst is over. V8 returns the pages
// it freed only from a memory-reducing GC, and its own memory reducer does not start one while the
// agent keeps allocating for scrapes and gossip (measured in `npm run soak`: the JS heap back to
// ~25 MB after 1,000 streams, its pages not). So when no request has been open for a while after
// some were served, the agent asks V8 for one such GC itself: a pause (~10–50 ms) at a moment
// when nobody waits for an answer, once per quiet period.
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/**
 * Pure: says when the agent has just turned quiet after serving requests. Fed on every tick with
 * the number of API requests received so far and the number still open.
 */
export class QuietAfterBusy {
  readonly #quietMs: number;
  #received = 0;
  #busyAt = -Infinity;
  /** Requests came since the last release: the next quiet period releases. */
  #served = false;

  constructor(quietMs: number) {
    this.#quietMs = quietMs;
  }

  /** True once per quiet period: nothing received or open for `quietMs` after serving requests. */
  observe(now: number, received: number, open: number): boolean {
    if (received !== this.#received || open > 0) {
      if (received !== this.#received) this.#served = true;
      this.#received = received;
      this.#busyAt = now;
      return false;
    }
    if (!this.#served || now - this.#busyAt < this.#quietMs) return false;
    this.#served = false;
    return true;
  }
}

/**
 * A memory-reducing full GC (V8's "last resort": unreachable objects collected, pooled pages
 * and the young generation's spare space handed back to the OS). V8 offers it only through the
 * gc() its --expose-gc flag installs in contexts created while the flag is on: one context gets
 * it, and the flag goes off again so no module in the agent sees a global gc().
 */
export function memoryReducingGc(): () => void {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as (options: object) => void;
  setFlagsFromString('--no-expose-gc');
  if (typeof gc !== 'function') throw new Error('this Node.js does not expose a gc() to new contexts');
  return () => gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
}

export interface IdleReleaseDeps {
  quietMs: number;
  now: () => number;
  /** API requests received so far (a counter that only grows). */
  received: () => number;
  /** API requests open now. */
  open: () => number;
  release: () => void;
  /** Called after each release (kinference_memory_releases_total). */
  released?: () => void;
}

/** Checks every quietMs / 2; stop() ends it. The timer never keeps the process alive. */
export function startIdleRelease(deps: IdleReleaseDeps): { stop(): void } {
  const quiet = new QuietAfterBusy(deps.quietMs);
  const timer = setInterval(
    () => {
      if (!quiet.observe(deps.now(), deps.received(), deps.open())) return;
      deps.release();
      deps.released?.();
    },
    Math.max(10, deps.quietMs / 2),
  );
  timer.unref();
  return { stop: () => clearInterval(timer) };
}

/** What the agent gives back when it turns quiet: one memory-reducing GC (V8's pooled pages, and the native halves of what it collects). */
export function memoryRelease(): () => void {
  return memoryReducingGc();
}
