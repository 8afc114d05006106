// Runs a SimEngine in real time: one timer, armed for the end of the step in flight.

import type { SimClock } from './clock.ts';
import { realClock } from './clock.ts';
import type { SimEngine } from './engine.ts';

export class RealtimeDriver {
  readonly #engine: SimEngine;
  readonly #clock: SimClock;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #stopped = false;

  constructor(engine: SimEngine, clock: SimClock = realClock) {
    this.#engine = engine;
    this.#clock = clock;
    engine.setWakeListener(() => this.#arm());
    this.#arm();
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#engine.setWakeListener(undefined);
  }

  #arm(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#stopped) return;
    const next = this.#engine.nextEventTime();
    if (next === undefined) return;
    // Timers are late by a millisecond or so; the engine keeps its own timeline, so lateness
    // delays delivery a little but never shifts later steps.
    this.#timer = setTimeout(
      () => {
        this.#engine.advanceTo(this.#clock.now());
        this.#arm();
      },
      Math.max(0, next - this.#clock.now()),
    );
  }
}
