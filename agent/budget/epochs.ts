// Window arithmetic of the budget ledger. An epoch is floor(wall-clock ms / window length): every
// agent derives the same calendar window (UTC) from its own clock, with no coordination.
import { WINDOW_MS, type BudgetWindow } from './limits.ts';

export function epochOf(window: BudgetWindow, at: number): number {
  return Math.floor(at / WINDOW_MS[window]);
}

/** The current epoch of every window: a reservation remembers these so its spend lands where it began. */
export function epochsAt(now: number): Record<BudgetWindow, number> {
  return { minute: epochOf('minute', now), hour: epochOf('hour', now), day: epochOf('day', now) };
}
