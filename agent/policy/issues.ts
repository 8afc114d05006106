// A problem found in a set of policies rather than in one (duplicates, ties, loosened guardrails):
// what the set checks in resolve.ts and floor.ts report, and `kinference policy check` prints.

export interface PolicySetIssue {
  severity: 'error' | 'warning';
  /** Index of the policy in the array given. */
  index: number;
  /** Field the issue is about, e.g. `metadata.name`, `spec.overflow.deny.tags`. */
  path: string;
  message: string;
  /** The other policy of a tie or duplicate. */
  other?: number;
}
