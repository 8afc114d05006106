// Durations in config and policy are strings like `250ms`, `30s`, `1m`, `1.5s`. Numbers mean ms.
// Here, below both, so the policy core and the config shell read them the same way.

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/;

export function isDuration(value: unknown): boolean {
  return typeof value === 'string' && DURATION.test(value.trim());
}

/** Milliseconds for a duration string; throws a message naming the bad value. */
export function parseDuration(value: string | number): number {
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value < 0) throw new Error(`invalid duration ${value}`);
    return value;
  }
  const match = DURATION.exec(value.trim());
  if (!match) throw new Error(`invalid duration "${value}" (expected e.g. 250ms, 30s, 1m)`);
  return Number(match[1]) * UNIT_MS[match[2]];
}
