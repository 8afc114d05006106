// Overflow budgets and priority classes as the policy states them, and how the platform floor
// caps them. Pure.
//
// A limit applies to each tenant a policy covers: at most `tokens` overflowed tokens (prompt +
// completion, as the provider reports them) and at most `requests` overflowed requests per
// calendar window (UTC minute, hour or day), counted over every provider or, with `provider`,
// over that one only. Every limit of the policy and every limit of the floor holds at once
// (resolve.ts's applyFloor adds the floor's), so the strictest wins without a merge rule; `policy check` rejects a namespace limit looser than
// the floor's for the same window and provider, because it would read as a promise the floor
// does not keep.

export const BUDGET_WINDOWS = ['minute', 'hour', 'day'] as const;
export type BudgetWindow = (typeof BUDGET_WINDOWS)[number];

export const WINDOW_MS: Readonly<Record<BudgetWindow, number>> = { minute: 60_000, hour: 3_600_000, day: 86_400_000 };

export interface BudgetLimit {
  window: BudgetWindow;
  /** Absent: the limit counts overflow to every provider. */
  provider?: string;
  tokens?: number;
  requests?: number;
}

export const PRIORITIES = ['critical', 'standard', 'sheddable'] as const;
export type Priority = (typeof PRIORITIES)[number];
/** Lower ranks are served first and shed last. */
export const PRIORITY_RANK: Readonly<Record<Priority, number>> = { critical: 0, standard: 1, sheddable: 2 };
/** The request header a policy may let callers set their class with. */
export const PRIORITY_HEADER = 'x-kinference-priority';

export interface PriorityPolicy {
  /** The class of a request that claims none (or may not claim one). */
  class: Priority;
  /** Classes a caller may claim with the header; empty: the header is ignored. */
  header: readonly Priority[];
}

export const DEFAULT_PRIORITY: PriorityPolicy = Object.freeze({
  class: 'standard',
  header: Object.freeze([]) as readonly Priority[],
});

/** The class of one request: the header's when the policy allows that class, else the policy's. */
export function priorityOf(policy: PriorityPolicy, header: string | undefined): Priority {
  const claimed = header?.trim().toLowerCase();
  return policy.header.find((p) => p === claimed) ?? policy.class;
}

/** Same window and provider scope: the two limits bound the same counter. */
export function sameScope(a: BudgetLimit, b: BudgetLimit): boolean {
  return a.window === b.window && (a.provider ?? '') === (b.provider ?? '');
}

/** `hour` or `hour/bedrock`, for messages, metric labels and explain. */
export function scopeName(limit: BudgetLimit): string {
  return limit.provider === undefined ? limit.window : `${limit.window}/${limit.provider}`;
}

/** Why a namespace policy's limits loosen the floor (empty: they do not). */
export function budgetLoosenings(policy: readonly BudgetLimit[], floor: readonly BudgetLimit[]): string[] {
  const issues: string[] = [];
  for (const limit of policy) {
    for (const cap of floor.filter((f) => sameScope(f, limit))) {
      for (const unit of ['tokens', 'requests'] as const) {
        const mine = limit[unit];
        const max = cap[unit];
        if (max !== undefined && (mine === undefined || mine > max)) {
          issues.push(
            `${scopeName(limit)}: ${mine === undefined ? `no ${unit} limit` : `${mine} ${unit}`} is looser than the floor's ${max}`,
          );
        }
      }
    }
  }
  return issues;
}

/** Two limits of one policy for the same window and provider: which one was meant? */
export function duplicateScopes(limits: readonly BudgetLimit[]): number[] {
  return limits.flatMap((limit, i) => (limits.slice(0, i).some((other) => sameScope(other, limit)) ? [i] : []));
}
