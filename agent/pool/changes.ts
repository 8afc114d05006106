// The pool's change signal: a version bumped on every change (a scrape, a gossip update, a request
// ending), and the requests waiting for a pod, woken all at once by the next change.

type Waiter = () => void;

export class PoolChanges {
  readonly #waiters = new Set<Waiter>();
  #version = 0;

  get version(): number {
    return this.#version;
  }

  /** Resolves on the next change, at `timeoutMs`, or when `signal` aborts. */
  next(timeoutMs: number, signal: AbortSignal): Promise<'change' | 'timeout' | 'aborted'> {
    if (signal.aborted) return Promise.resolve('aborted');
    return new Promise((resolve) => {
      const finish = (result: 'change' | 'timeout' | 'aborted') => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        this.#waiters.delete(waiter);
        resolve(result);
      };
      const waiter = () => finish('change');
      const onAbort = () => finish('aborted');
      const timer = setTimeout(() => finish('timeout'), timeoutMs);
      signal.addEventListener('abort', onAbort, { once: true });
      this.#waiters.add(waiter);
    });
  }

  /** Something changed: a new version, and every waiter woken. */
  changed(): void {
    this.#version++;
    if (this.#waiters.size === 0) return;
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    for (const wake of waiters) wake();
  }
}
