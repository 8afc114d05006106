// One overflow's hold on its tenant's budget, from reservation to settlement: shared by the
// ledger, which books it, and the share rule, which counts what each agent admitted.
import type { BudgetWindow } from './limits.ts';

export interface Reservation {
  readonly tenant: string;
  readonly provider: string;
  readonly tokens: number;
  /** The epoch of each window counted (those the tenant's limits use) when reserved: the spend belongs there, even if settled later. */
  readonly epochs: Readonly<Partial<Record<BudgetWindow, number>>>;
  done: boolean;
}
