// Scrape failures are logged, but a pod failing 10 times a second must not flood the log: the
// first failure of a pod is logged at once, then at most one line per interval saying how many
// were held back. Pure: time comes in.

export class FailureLog {
  readonly #intervalMs: number;
  readonly #last = new Map<string, { at: number; held: number }>();

  constructor(intervalMs: number) {
    this.#intervalMs = intervalMs;
  }

  /** The line to log for this failure now, or undefined when it is held back. */
  line(key: string, message: string, now: number): string | undefined {
    const last = this.#last.get(key);
    if (last !== undefined && now - last.at < this.#intervalMs) {
      last.held++;
      return undefined;
    }
    this.#last.set(key, { at: now, held: 0 });
    return last !== undefined && last.held > 0 ? `${message} (${last.held} more since the last line)` : message;
  }

  /** The key recovered (or left): its next failure is logged at once. */
  forget(key: string): void {
    this.#last.delete(key);
  }
}
