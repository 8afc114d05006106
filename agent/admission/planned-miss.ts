// The chance of a miss an admission carries, by its pod's calibration: what the admission loop
// (threshold.ts) counts as planned misses, long before outcomes can say whether its budget is spent.

/** The least miss chance plannedMissChance resolves, and the most it reports. */
const LEAST_MISS = 1e-4;
const MOST_MISS = 0.5;

/**
 * The chance that a request admitted to this pod misses the SLO, by the pod's calibration: 1 − q
 * for the strictest q whose q-quantile TTFT is still within the SLO (found by bisection in
 * log(1 − q), the margin growing with q). A request far below the SLO carries almost none; one
 * admitted at the edge carries about 1 − (the admission quantile). Undefined without a calibration.
 */
export function plannedMissChance(
  chosen: { candidate: { networkCostMs: number; logMargin?: (q: number) => number }; predictedMs: number },
  sloMs: number,
): number | undefined {
  const { candidate, predictedMs } = chosen;
  if (!candidate.logMargin) return undefined;
  const podMs = predictedMs - candidate.networkCostMs;
  if (!(podMs > 0)) return LEAST_MISS;
  const slack = Math.log((sloMs - candidate.networkCostMs) / podMs);
  const within = (logMiss: number) => candidate.logMargin!(1 - Math.exp(logMiss)) <= slack;
  let strict = Math.log(LEAST_MISS);
  let loose = Math.log(MOST_MISS);
  if (within(strict)) return LEAST_MISS;
  if (!within(loose)) return MOST_MISS;
  for (let i = 0; i < 12; i++) {
    const mid = (strict + loose) / 2;
    if (within(mid)) loose = mid;
    else strict = mid;
  }
  return Math.exp(loose);
}
