// The shell around the wait queue: requests that wait for a pod are woken one at a time, in the
// queue's order (priority class, fair across tenants, first come first served within one), when
// the pool changes and the head can use what changed. One pool subscription and one deadline
// timer for every waiter, instead of each waiter racing the others on every change.
import type { Priority } from '../budget/limits.ts';
import { WaitQueue, type Waiter } from './wait-queue.ts';

export type WaitOutcome = 'turn' | 'timeout' | 'shed' | 'full';

interface Entry {
  /** Could this waiter be served now (a pod for it, or it may leave)? Re-run per change. */
  fits: () => boolean;
  resolve: (outcome: WaitOutcome) => void;
}

export interface WaitingRoomDeps {
  maxWaiting: number;
  now: () => number;
  /** Resolves at the next change of any candidate (the pool's), or when `signal` aborts. */
  nextChange(timeoutMs: number, signal: AbortSignal): Promise<unknown>;
  /** A tenant's share against the others in its class (default 1). */
  weight?: (tenant: string) => number;
}

/** Longest single wait on the pool's change signal; the loop re-arms it while anyone waits. */
const CHANGE_POLL_MS = 60_000;

export class WaitingRoom {
  readonly #deps: WaitingRoomDeps;
  readonly #queue: WaitQueue<Entry>;
  #timer: NodeJS.Timeout | undefined;
  #timerAt: number | undefined;
  #watching: AbortController | undefined;
  #dispatchScheduled = false;

  constructor(deps: WaitingRoomDeps) {
    this.#deps = deps;
    this.#queue = new WaitQueue({ maxWaiting: deps.maxWaiting, weight: deps.weight });
  }

  depth(): ReturnType<WaitQueue<Entry>['depth']> {
    return this.#queue.depth();
  }

  /**
   * Waits for this request's turn: 'turn' when the pool changed and it is the first waiter in
   * order that can use it; 'timeout' at the deadline; 'shed' when a higher class or a tenant
   * under its share took its place; 'full' at once when the queue is full and it may displace
   * nobody. Throws when the client leaves.
   */
  async wait(
    at: { tenant: string; priority: Priority; deadline: number },
    fits: () => boolean,
    signal: AbortSignal,
  ): Promise<WaitOutcome> {
    if (signal.aborted) throw new Error('client gone');
    let resolve!: (outcome: WaitOutcome) => void;
    const outcome = new Promise<WaitOutcome>((r) => (resolve = r));
    const enqueued = this.#queue.enqueue({ fits, resolve }, at);
    if (!enqueued.admitted) return 'full';
    enqueued.shed?.item.resolve('shed');
    const waiter: Waiter<Entry> = enqueued.waiter;
    const onAbort = () => {
      this.#queue.remove(waiter);
      resolve('timeout'); // settles the promise; the caller sees the abort below
      this.#rearm();
    };
    signal.addEventListener('abort', onAbort, { once: true });
    this.#rearm();
    this.#watch();
    try {
      const result = await outcome;
      if (signal.aborted) throw new Error('client gone');
      return result;
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
  }

  /** Stops the pool subscription and the timer; waiters still queued time out. */
  close(): void {
    this.#watching?.abort();
    clearTimeout(this.#timer);
    for (const w of this.#queue.expire(Infinity)) w.item.resolve('timeout');
  }

  /** One subscription to the pool while anyone waits: each change offers a turn. */
  #watch(): void {
    if (this.#watching) return;
    const watching = new AbortController();
    this.#watching = watching;
    void (async () => {
      while (this.#queue.size > 0 && !watching.signal.aborted) {
        await this.#deps.nextChange(CHANGE_POLL_MS, watching.signal);
        this.#dispatch();
      }
      if (this.#watching === watching) this.#watching = undefined;
    })();
  }

  /**
   * The first waiter in order that can be served now gets its turn. The next offer waits until
   * the woken request has acted (taken its pod: a later macrotask), so one freed pod wakes one.
   */
  #dispatch(): void {
    const waiter = this.#queue.take((w) => w.item.fits());
    if (!waiter) return;
    waiter.item.resolve('turn');
    this.#rearm();
    if (this.#dispatchScheduled) return;
    this.#dispatchScheduled = true;
    setImmediate(() => {
      this.#dispatchScheduled = false;
      if (this.#queue.size > 0) this.#dispatch();
    });
  }

  /** The one deadline timer, at the earliest waiter's deadline; nobody waiting: no timer, no subscription. */
  #rearm(): void {
    if (this.#queue.size === 0) {
      this.#watching?.abort();
      this.#watching = undefined;
    }
    const next = this.#queue.nextDeadline();
    if (next === this.#timerAt) return;
    clearTimeout(this.#timer);
    this.#timerAt = next;
    if (next === undefined) return;
    this.#timer = setTimeout(
      () => {
        this.#timerAt = undefined;
        for (const w of this.#queue.expire(this.#deps.now())) w.item.resolve('timeout');
        this.#rearm();
      },
      Math.max(0, next - this.#deps.now()),
    );
    this.#timer.unref?.();
  }
}
