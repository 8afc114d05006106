// The log of recent origin advances that digests offer first: a ring buffer, pure.
import type { OriginRecord } from './records.ts';

/** A bounded log of recent advances, newest last: a ring that grows with the number of origins. */
export class Recent {
  #origins: (OriginRecord | undefined)[] = new Array(64);
  #times = new Float64Array(64);
  #next = 0;
  #count = 0;

  push(o: OriginRecord, at: number, bound: number): void {
    if (bound > this.#origins.length) this.#grow(bound * 2);
    const capacity = this.#origins.length;
    this.#origins[this.#next] = o;
    this.#times[this.#next] = at;
    this.#next = (this.#next + 1) % capacity;
    this.#count = Math.min(this.#count + 1, capacity);
  }

  /** Origins noted within `withinMs`, newest first, until `visit` returns false. */
  each(now: number, withinMs: number, visit: (o: OriginRecord) => boolean): void {
    const capacity = this.#origins.length;
    for (let k = 1; k <= this.#count; k++) {
      const i = (this.#next - k + capacity) % capacity;
      if (now - this.#times[i] > withinMs) return;
      const o = this.#origins[i]!;
      if (!o.gone && !visit(o)) return;
    }
  }

  #grow(capacity: number): void {
    const origins: (OriginRecord | undefined)[] = new Array(capacity);
    const times = new Float64Array(capacity);
    const old = this.#origins.length;
    for (let k = this.#count; k >= 1; k--) {
      const i = (this.#next - k + old) % old;
      origins[this.#count - k] = this.#origins[i];
      times[this.#count - k] = this.#times[i];
    }
    this.#origins = origins;
    this.#times = times;
    this.#next = this.#count % capacity;
  }
}
