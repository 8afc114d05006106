// Deadlines of one length, kept in the order they were set (which is the order they fall due),
// under one timer. A pod exchange's headers deadline was a setTimeout of its own; at a few hundred
// requests a second, with one request open at a time, node's timer list for that length emptied
// and was built again for every request (bench:proxy --serial, docs/benchmarks.md "Proxy overhead"). Here a
// deadline is a list node: set and cleared in O(1), no timer call unless none is armed; the timer
// fires at the earliest deadline set, skips what was cleared, and arms again for the next one.
// Each deadline still fires at its own time (never before it), as its own setTimeout would.

/** One deadline in a `Deadlines` list; `clear()` it when what it guards is done. */
export class Deadline<T> {
  readonly item: T;
  readonly at: number;
  prev: Deadline<T> | undefined;
  next: Deadline<T> | undefined;
  readonly #list: Deadlines<T>;
  /** Set when it fired or was cleared. */
  done = false;

  constructor(list: Deadlines<T>, item: T, at: number) {
    this.#list = list;
    this.item = item;
    this.at = at;
  }

  clear(): void {
    if (this.done) return;
    this.done = true;
    this.#list.unlink(this);
  }
}

export class Deadlines<T> {
  readonly ms: number;
  readonly #onDue: (item: T) => void;
  readonly #now: () => number;
  #head: Deadline<T> | undefined;
  #tail: Deadline<T> | undefined;
  /** When the armed timer fires (undefined: none armed). */
  #armedAt: number | undefined;

  constructor(ms: number, onDue: (item: T) => void, now: () => number = () => performance.now()) {
    this.ms = ms;
    this.#onDue = onDue;
    this.#now = now;
  }

  /** `onDue(item)` in `ms`, unless the returned deadline is cleared first. */
  add(item: T): Deadline<T> {
    const deadline = new Deadline(this, item, this.#now() + this.ms);
    deadline.prev = this.#tail;
    if (this.#tail) this.#tail.next = deadline;
    else this.#head = deadline;
    this.#tail = deadline;
    // An armed timer is due at or before this deadline (all have the same length): it re-arms when it fires.
    if (this.#armedAt === undefined) this.#arm(this.ms);
    return deadline;
  }

  unlink(deadline: Deadline<T>): void {
    if (deadline.prev) deadline.prev.next = deadline.next;
    else this.#head = deadline.next;
    if (deadline.next) deadline.next.prev = deadline.prev;
    else this.#tail = deadline.prev;
    deadline.prev = deadline.next = undefined;
  }

  #arm(ms: number): void {
    this.#armedAt = this.#now() + ms;
    // Unref'd: a deadline guards a socket, which keeps the process alive by itself while it is open.
    setTimeout(() => this.fire(), ms).unref();
  }

  fire(): void {
    this.#armedAt = undefined;
    const now = this.#now();
    for (let d = this.#head; d !== undefined && d.at <= now; d = this.#head) {
      d.done = true;
      this.unlink(d);
      this.#onDue(d.item);
    }
    // A callback may have added deadlines (and armed the timer) already.
    if (this.#head !== undefined && this.#armedAt === undefined) this.#arm(Math.max(1, this.#head.at - now));
  }
}
