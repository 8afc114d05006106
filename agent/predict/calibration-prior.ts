// A pod's calibration as its agent summarises it for others (gossip carries it), and what a
// receiver makes of one: a bounded prior, never a verdict. Pure.
//
// Why a summary at all: a restarted agent (a rollout, a crash) and an agent routing to another
// node's pod otherwise start from the cold margin (×3 at 99%): right after a restart mid-peak on
// a slow pool that kept about 0.7 of the local share a learned margin keeps.
//
// What it holds, per regime: the evidence behind it (observations) and two log margins, at the
// median (the full-batch bias reads it) and at 90%. Margins at other quantiles follow an
// exponential tail through both: linear in log(1/(1-q)), the scaling the cold margin uses too,
// which overstates a log-normal's 99% (3.1σ for 2.3σ); above 90% never less steep than the cold
// margin (summaryMargin). Not at 99%: the admission loop asks for p80-p99, and a window of under
// 100 observations reads its 99% as its largest error (one outlier: ×15 on a full batch of vllm 16
// seqs, which held a restarted agent at 0.7 of the share the cold margin kept). Two numbers,
// because a round of gossip (a digest and a node's 8 pods with their identities) has to fit one
// datagram, and that left about ten bytes per pod.

/** Whether requests stood queued ahead of this one at the pod when it was sent, or its batch was full. */
export type Regime = 'free' | 'full' | 'queued';

export interface RegimeSummary {
  /** Observations the margins stand on (the summarising agent's evidence for this regime). */
  observations: number;
  /** Log margins over the mean prediction at the median and at 90%. */
  median: number;
  p90: number;
}

/** Per regime; a regime without observations is absent. */
export type CalibrationSummary = Partial<Record<Regime, RegimeSummary>>;

export const REGIMES: readonly Regime[] = ['free', 'full', 'queued'];

/** The quantiles a summary states, and their position on the exponential tail's axis. */
export const SUMMARY_QUANTILES = { median: 0.5, p90: 0.9 } as const;
/** A quantile's position on the exponential tail's axis, log(1/(1-q)): margins are linear in it. */
export const tailPosition = (q: number): number => Math.log(1 / (1 - q));
const X_MEDIAN = tailPosition(SUMMARY_QUANTILES.median);
const X_P90 = tailPosition(SUMMARY_QUANTILES.p90);

/** What a receiver accepts of a summary: log margins within ±`maxLogMargin`, evidence up to `maxObservations`. */
export const SUMMARY_LIMITS = { maxLogMargin: 4, maxObservations: 1 << 20 };

/**
 * The summary's log margin at quantile q: its median below the median (never lower: a prior
 * errs wide), the straight line through both on log(1/(1-q)) between them, and above 90% that
 * line at a slope of at least `minTailSlope` (per unit of log(1/(1-q)); the cold margin's). Two
 * points say nothing of the tail beyond them: extrapolated at their own slope, a heavy tail's
 * prior came out narrow (a restarted agent's leavable attainment fell to 98.0% on a TGI pool of
 * 8 sequences at 1.5× costs); the cold slope puts it back, for ~0.05 of the local share at most.
 */
export function summaryMargin(s: RegimeSummary, q: number, minTailSlope = 0): number {
  const x = tailPosition(Math.min(q, 1 - 1e-9));
  if (x <= X_MEDIAN) return s.median;
  const slope = (s.p90 - s.median) / (X_P90 - X_MEDIAN);
  if (x <= X_P90) return s.median + slope * (x - X_MEDIAN); // exactly each stated margin at its own quantile
  return s.p90 + Math.max(slope, minTailSlope) * (x - X_P90);
}

/**
 * A summary made safe to use as a prior, whoever sent it: non-finite or non-positive evidence
 * drops the regime, margins are clamped into range, the 90% margin is at least the median and
 * at least 0 (a prior never claims a pod's tail beats its mean prediction). Undefined: nothing left.
 */
export function sanitizeSummary(raw: CalibrationSummary | undefined): CalibrationSummary | undefined {
  if (!raw) return undefined;
  const { maxLogMargin, maxObservations } = SUMMARY_LIMITS;
  const clamp = (x: number) => Math.min(maxLogMargin, Math.max(-maxLogMargin, x));
  const out: CalibrationSummary = {};
  let any = false;
  for (const regime of REGIMES) {
    const r = raw[regime];
    if (!r || !(r.observations >= 1) || !Number.isFinite(r.median) || !Number.isFinite(r.p90)) continue;
    const median = clamp(r.median);
    out[regime] = {
      observations: Math.min(maxObservations, Math.floor(r.observations)),
      median,
      p90: Math.max(clamp(r.p90), median, 0),
    };
    any = true;
  }
  return any ? out : undefined;
}

/**
 * A margin widened to `floor` as far as its evidence is thin (`weight` 0: none, 1: enough for the
 * quantile). The floor is a floor, not an addition: a cold start must still admit idle pods, or no
 * request would ever reach them to teach the calibration.
 */
export function flooredByEvidence(margin: number, weight: number, floor: number): number {
  return weight * margin + (1 - weight) * Math.max(margin, floor);
}

/** The pseudo-observations a prior still stands for: at most `cap`, one fewer per own observation. */
export function priorWeight(prior: RegimeSummary, cap: number, ownObservations: number): number {
  return Math.max(0, Math.min(cap, prior.observations) - ownObservations);
}

/**
 * A margin with a prior: `prior` stands for at most `cap` pseudo-observations at its margins,
 * one fewer for each of the agent's own `own.count` (own evidence replaces it), mixed with the
 * own window's margin by weight. The evidence so counted decides how far `floor` (the node's
 * margin, or the cold one) still widens it, as it does for a pod's own window; `needed(q)` is
 * what a window needs to answer for q. The prior's evidence is counted against the need of the
 * quantiles it states (90% at most): above them it claims no evidence, its tail is extrapolated
 * (summaryMargin), wider than a log-normal's. Counted against q's need, a restarted agent's margin
 * stayed near cold at the p99-p99.9 its admission loop starts at (0.5 of the steady local share
 * for 60 s on the slowest pool). `bound`: the node's own margin where its window answers for q;
 * a prior never takes a pod below it. `tailSlope`: the least slope of the prior's tail above 90%.
 */
export function blendWithPrior(
  own: { count: number; margin: number } | undefined,
  prior: RegimeSummary,
  q: number,
  needed: (q: number) => number,
  limits: { cap: number; floor: number; bound: number; tailSlope: number },
): number {
  const n = own?.count ?? 0;
  const k = priorWeight(prior, limits.cap, n);
  const p = summaryMargin(prior, q, limits.tailSlope);
  const mixed = n > 0 && own ? (n * own.margin + k * p) / (n + k) : p;
  const w = Math.min(1, n / needed(q) + k / needed(Math.min(q, SUMMARY_QUANTILES.p90)));
  return Math.max(limits.bound, flooredByEvidence(mixed, w, limits.floor));
}
