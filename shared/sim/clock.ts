// Time for the simulator, in milliseconds. Real time for the HTTP server; a virtual clock for
// benchmarks that simulate minutes of traffic across many pods in seconds.

export interface SimClock {
  now(): number;
}

export const realClock: SimClock = { now: () => performance.now() };

/** A clock that only moves when told to. Pair it with `SimEngine.advanceTo` (see engine.ts). */
export class VirtualClock implements SimClock {
  #t: number;

  constructor(start = 0) {
    this.#t = start;
  }

  now(): number {
    return this.#t;
  }

  /** Moves the clock forward; time never runs backwards. */
  set(t: number): void {
    if (t < this.#t) throw new RangeError(`virtual clock cannot go back from ${this.#t} to ${t}`);
    this.#t = t;
  }
}
