// The admission threshold as a closed loop on the policy's attainment target. A request that may
// leave goes to a pod only if its chance of meeting the SLO (the calibrated quantile of its
// predicted TTFT) is at least `quantile`; this module steers that quantile from the measured
// attainment of what was admitted to pods, so that measured attainment sits at the target less a
// safety margin, whatever the calibration's own bias.
//
// Why a loop: each request admitted on its *own* p99 meets the SLO far more often than 99% when
// the pool is not saturated (most requests are far from the edge), so the error budget was left
// unspent and requests overflowed that the GPUs could have served; and a calibration that is off
// (a new pod, a shift in load) has nothing to correct it but its own window.
//
// The law, per outcome, in log(1 - quantile) (the log of the miss chance a request may carry):
// a miss tightens by `tightenStep`, a success loosens by tightenStep · aim / (1 - aim), so the
// drift is zero exactly when the share of misses is `aim` (stochastic approximation of a
// quantile). Tightening is fast (one miss undoes ~140 successes' loosening at 99%), once per
// episode: a miss of a request that was already in flight when an earlier miss tightened (admitted
// before it, on the same quantile) and that shows soon after is part of that miss's episode and
// tightens by a quarter step. Loosening is slow, and faster only while the window's error budget
// is mostly unspent, counted both in misses measured and in misses planned (each admission's miss
// chance by its pod's calibration, which a pool serving few requests a minute needs, as its
// outcomes are too few to tell 99.3% from 100%). While the window holds no miss at all and its
// admissions were planned far below the aim (over the window, and over its last seconds), it also
// loosens with time: per outcome alone, a pool admitting two requests a second took two minutes to
// climb from its strictest bound to where its budget is spent. A request that may not leave and
// missed its SLO behind requests the loop admitted (still awaiting their first token at its pod:
// leavable-ahead.ts) counts as one of its misses: the slots those took are what it waited for.
// The quantile is bounded on both sides (p80–p99.9 at 99%), so the loop can neither admit coin
// flips nor turn the pods off; a fresh loop holds the strict bound until its first admitted
// request's SLO has passed. Pure: time comes in as arguments.

export interface ThresholdOptions {
  /** Share of the target's error budget held back (0.3: aim at 99.3% when the target is 99%). */
  safetyMargin: number;
  /** Lowest quantile a request may be admitted on (a request likelier to miss than this never is). */
  minQuantile: number;
  /** And the miss chance a request may carry is at most (1 - target) times this (5: p95 at a 99% target). */
  minQuantileBudgetFactor: number;
  /** Highest: the miss chance never goes below (1 - target) times this. */
  maxQuantileBudgetFactor: number;
  /** How much one miss tightens log(1 - quantile). */
  tightenStep: number;
  /**
   * A miss of a request admitted before the miss that began an episode (in flight together: a pod's
   * queue surging makes them late together) that shows within `episodeMs` of it tightens by
   * `episodeStepShare` of a step. Within less where outcomes come fast, so that misses arriving one
   * by one at the aim seldom share an episode (at most `episodeShare` of the time) and the loop still
   * settles at its aim. (Counted one by one, six misses in five seconds held a loop at p99.8 for a
   * minute: TGI 48 seqs at 1.5× in bench:peak.)
   */
  episodeMs: number;
  episodeShare: number;
  episodeStepShare: number;
  /**
   * Loosening runs up to this many times faster while the window has spent none of its budget,
   * by the misses measured and by the misses its admissions planned (their calibrated miss chances).
   */
  unspentBoost: number;
  /** Misses in the window that do not yet count as spending its budget (one miss in 20 requests is no trend). */
  missesAllowed: number;
  /** Sliding window over which attainment is measured (ms), and its bucket width. */
  windowMs: number;
  bucketMs: number;
  /**
   * While no admitted request in the window missed, and its admissions, in the whole window and
   * in its last `cleanSpanMs`, were planned at under half the aim's misses (far from the edge),
   * log(1 - quantile) also grows by this much per second (0.1: the miss chance a request may
   * carry grows 10% a second, p99.9 to p98 in 30 s). Near the edge, outcomes alone move it.
   */
  cleanLoosenPerS: number;
  cleanSpanMs: number;
  /** Admitted requests awaiting their first token that the loop keeps (the oldest drop out). */
  maxPending: number;
  /**
   * Until the first admitted request's SLO has passed, no miss can have shown: a fresh loop admits
   * at its strictest bound until then (a fresh agent straight into a peak fills its pods in that
   * first SLO, before any feedback), and from its starting quantile after.
   */
  strictUntilFeedback: boolean;
}

export const DEFAULT_THRESHOLD: ThresholdOptions = {
  safetyMargin: 0.3,
  minQuantile: 0.5,
  minQuantileBudgetFactor: 20,
  maxQuantileBudgetFactor: 0.1,
  tightenStep: 0.5,
  episodeMs: 1000,
  episodeShare: 0.1,
  episodeStepShare: 0.25,
  unspentBoost: 8,
  missesAllowed: 1,
  cleanLoosenPerS: 0.1,
  cleanSpanMs: 5000,
  windowMs: 60_000,
  bucketMs: 1000,
  maxPending: 100_000,
  strictUntilFeedback: true,
};

/** What the dashboard, /explain and metrics show of one loop. */
export interface ThresholdState {
  target: number;
  /** The attainment the loop aims at: target less the safety margin of its budget. */
  aim: number;
  quantile: number;
  /** In the window: admitted requests measured, and those within the SLO. */
  measured: number;
  within: number;
  /** within / measured (NaN before any). */
  attainment: number;
  /** Share of the window's error budget not yet spent (1: none spent; negative: overspent). */
  budgetLeft: number;
  /** The mean miss chance the window's admissions were planned with (NaN before any). */
  plannedMiss: number;
  /** Must-stay requests in the window that missed their SLO behind requests this loop admitted (counted among the misses). */
  starved: number;
  /** Why the quantile is where it is, in words. */
  why: string;
}

export class AdmissionThreshold {
  readonly options: ThresholdOptions;
  readonly target: number;
  /** log(1 - quantile). */
  #logMiss: number;
  readonly #minLogMiss: number;
  readonly #maxLogMiss: number;
  /** Ring of buckets: measured and within per bucket, and each bucket's start. */
  readonly #measured: Float64Array;
  readonly #within: Float64Array;
  /** Admissions with a planned miss chance, and the sum of those chances, per bucket (at admission). */
  readonly #planned: Float64Array;
  readonly #plannedMiss: Float64Array;
  /** Must-stay requests that missed behind this loop's admissions, per bucket (also among its misses). */
  readonly #starved: Float64Array;
  readonly #start: Float64Array;
  #lastMove: 'none' | 'tightened' | 'same episode' | 'starved' | 'loosened' | 'loosened with time' = 'none';
  /** When the window was last found clean (no miss, little planned), NaN when it was not. */
  #cleanSince = NaN;
  #cleanCheckedAt = -Infinity;
  /** Requests admitted so far: a request's place in that order says what was in flight with it. */
  #admissions = 0;
  /** When the current episode of misses began, and how many requests had been admitted by then. */
  #episodeAt = -Infinity;
  #episodeAdmissions = 0;
  /** Admitted requests not yet settled, oldest first from #pendingHead. */
  readonly #pending: { deadline: number; settled: boolean; admission: number }[] = [];
  #pendingHead = 0;
  /** When the first admitted request's SLO passes (NaN: nothing admitted yet). */
  #feedbackFrom = NaN;
  #feedback = false;

  constructor(target: number, options: Partial<ThresholdOptions> = {}, startQuantile = target) {
    this.options = { ...DEFAULT_THRESHOLD, ...options };
    this.target = target;
    const budget = 1 - target;
    this.#minLogMiss = Math.log(budget * this.options.maxQuantileBudgetFactor);
    this.#maxLogMiss = Math.min(
      Math.log(1 - this.options.minQuantile),
      Math.log(budget * this.options.minQuantileBudgetFactor),
    );
    this.#logMiss = this.#bounded(Math.log(1 - startQuantile));
    this.#feedback = !this.options.strictUntilFeedback;
    const n = Math.max(1, Math.ceil(this.options.windowMs / this.options.bucketMs));
    this.#measured = new Float64Array(n);
    this.#within = new Float64Array(n);
    this.#planned = new Float64Array(n);
    this.#plannedMiss = new Float64Array(n);
    this.#starved = new Float64Array(n);
    this.#start = new Float64Array(n).fill(-Infinity);
  }

  /** The miss share aimed at: the target's budget less the safety margin. */
  get aimMiss(): number {
    return (1 - this.target) * (1 - this.options.safetyMargin);
  }

  /** The quantile a request that may leave must meet the SLO at to be admitted to a pod. */
  get quantile(): number {
    return 1 - Math.exp(this.#feedback ? this.#logMiss : this.#minLogMiss);
  }

  /**
   * A request admitted to a pod at `now`, to be settled by its first token. If the SLO passes
   * first, it counts as a miss then (at the next `expire`), not only when its late token comes:
   * at the onset of a peak TTFTs grow to seconds, and the loop must tighten before they end.
   * The returned function settles it at `at` (`within`), or drops it (`within` undefined: the
   * attempt failed, or its TTFT is not measured), and does nothing once the request was counted.
   * `missChance` is the chance of a miss its pod's calibration gave it (plannedMissChance): the
   * window's planned misses say at once, long before outcomes can, whether the budget is spent.
   */
  admitted(now: number, sloMs: number, missChance?: number): (at: number, within?: boolean) => void {
    if (missChance !== undefined && Number.isFinite(missChance)) {
      const i = this.#bucket(now);
      this.#planned[i]++;
      this.#plannedMiss[i] += Math.min(1, Math.max(0, missChance));
    }
    if (Number.isNaN(this.#feedbackFrom)) this.#feedbackFrom = now + sloMs;
    const entry = { deadline: now + sloMs, settled: false, admission: ++this.#admissions };
    // Deadlines grow with admission time (one SLO per loop), so the queue is in deadline order.
    if (this.#pending.length - this.#pendingHead >= this.options.maxPending) this.#pendingHead++;
    this.#pending.push(entry);
    return (at, within) => {
      if (entry.settled) return;
      entry.settled = true;
      if (within !== undefined) this.observe(at, within, entry.admission);
    };
  }

  /**
   * Counts as misses the admitted requests whose SLO passed without a first token, and loosens
   * with time while the window is clean. Called before each decision.
   */
  expire(now: number): void {
    if (!this.#feedback && now >= this.#feedbackFrom) this.#feedback = true;
    const pending = this.#pending;
    while (this.#pendingHead < pending.length && pending[this.#pendingHead].deadline < now) {
      const entry = pending[this.#pendingHead++];
      if (entry.settled) continue;
      entry.settled = true;
      this.observe(now, false, entry.admission);
    }
    if (this.#pendingHead > 1024 && this.#pendingHead * 2 > pending.length) {
      pending.splice(0, this.#pendingHead);
      this.#pendingHead = 0;
    }
    this.#loosenWhileClean(now);
  }

  /** Requests this loop has admitted (a request's `admission` is its place in that count). */
  get admissions(): number {
    return this.#admissions;
  }

  /**
   * One request admitted to a pod, measured at `now`: within the SLO or not. `admission`: its
   * place among the loop's admissions (undefined: unknown, never part of an episode).
   */
  observe(now: number, within: boolean, admission?: number): void {
    const i = this.#bucket(now);
    this.#measured[i]++;
    if (within) this.#within[i]++;
    const aim = this.aimMiss;
    if (!within) {
      const episode =
        admission !== undefined &&
        admission <= this.#episodeAdmissions &&
        now - this.#episodeAt < this.#episodeSpan(now, aim);
      if (!episode) {
        this.#episodeAt = now;
        this.#episodeAdmissions = this.#admissions;
      }
      const step = this.options.tightenStep * (episode ? this.options.episodeStepShare : 1);
      this.#logMiss = this.#bounded(this.#logMiss - step);
      this.#lastMove = episode ? 'same episode' : 'tightened';
      return;
    }
    // Loosen faster the further the window's misses are below the aim (not the target: boosted
    // up to the target, the loop would settle there and spend its safety margin), at most
    // unspentBoost×: as far as both the misses measured and those planned are below it. Measured
    // alone, a pool that serves few requests a minute cannot show a miss share of 0.7% either way
    // for many minutes; planned alone, a calibration that is off would never be corrected.
    const window = this.#window(now);
    const missed = Math.max(0, window.measured - window.within - this.options.missesAllowed);
    const measuredUnspent = window.measured ? clamp01(1 - missed / (window.measured * aim)) : 1;
    const plannedUnspent = window.planned ? clamp01(1 - window.plannedMiss / (window.planned * aim)) : 1;
    const unspent = Math.min(measuredUnspent, plannedUnspent);
    const boost = 1 + (this.options.unspentBoost - 1) * unspent;
    const step = ((this.options.tightenStep * aim) / (1 - aim)) * boost;
    const before = this.#logMiss;
    this.#logMiss = this.#bounded(this.#logMiss + step);
    if (this.#logMiss !== before) this.#lastMove = 'loosened';
  }

  /**
   * How soon after an episode's first miss another belongs to it: `episodeMs`, or, where outcomes
   * come fast, the span in which misses at the aim, arriving independently (Poisson at the window's
   * rate of outcomes times the aim), fall with chance `episodeShare`.
   */
  #episodeSpan(now: number, aim: number): number {
    const perMs = this.#window(now).measured / this.options.windowMs;
    return Math.min(this.options.episodeMs, -Math.log(1 - this.options.episodeShare) / (perMs * aim));
  }

  /**
   * A request that may not leave missed its SLO at `now` while requests this loop admitted stood
   * ahead of it at its pod (LeavableAhead): a miss of this loop's. Without it the loop spends its
   * budget on its own requests alone, and the pods' slots on them, while must-stay requests, which
   * cannot go elsewhere, wait for those slots (bench:peak: must-stay requests at 1.5× met the SLO
   * less often under the loop than under the per-request p99 rule it replaced). `admissions`: this
   * loop's `admissions` when the request was sent (those ahead of it were admitted by then).
   */
  starved(now: number, admissions?: number): void {
    this.#starved[this.#bucket(now)]++;
    this.observe(now, false, admissions);
    this.#lastMove = 'starved';
  }

  /** The time-based part of loosening (cleanLoosenPerS); looked at every CLEAN_CHECK_MS at most. */
  #loosenWhileClean(now: number): void {
    if (!this.#feedback || !(this.options.cleanLoosenPerS > 0) || now - this.#cleanCheckedAt < CLEAN_CHECK_MS) return;
    this.#cleanCheckedAt = now;
    if (!this.#clean(now)) {
      this.#cleanSince = NaN;
      return;
    }
    if (!Number.isNaN(this.#cleanSince)) {
      const before = this.#logMiss;
      this.#logMiss = this.#bounded(this.#logMiss + (this.options.cleanLoosenPerS * (now - this.#cleanSince)) / 1000);
      if (this.#logMiss !== before) this.#lastMove = 'loosened with time';
    }
    this.#cleanSince = now;
  }

  /** No miss among the window's measured requests, and its admissions (all, and recent) planned well below the aim. */
  #clean(now: number): boolean {
    const farBelowAim = (c: { planned: number; plannedMiss: number }) =>
      c.plannedMiss <= (c.planned * this.aimMiss) / 2;
    const window = this.#window(now);
    if (window.measured === 0 || window.within < window.measured || !farBelowAim(window)) return false;
    const recent = this.#window(now, this.options.cleanSpanMs);
    return recent.planned > 0 && farBelowAim(recent);
  }

  state(now: number): ThresholdState {
    const { measured, within, planned, plannedMiss, starved } = this.#window(now);
    const quantile = this.quantile;
    const budgetLeft = this.#budgetLeft(now);
    const pct = (x: number) => `${Math.round(x * 1000) / 10}%`;
    let why: string;
    if (!this.#feedback) why = `no admitted request's SLO has passed yet: at the strictest bound (${pct(quantile)})`;
    else if (measured === 0) why = `no admitted request measured in the last ${this.options.windowMs / 1000}s: holding`;
    else if (this.#logMiss <= this.#minLogMiss) why = `misses above the aim: at the strictest bound (${pct(quantile)})`;
    else if (this.#logMiss >= this.#maxLogMiss) why = `budget unspent: at the loosest bound (${pct(quantile)})`;
    else if (this.#lastMove === 'tightened') why = `a miss: tightened (measured ${pct(within / measured)})`;
    else if (this.#lastMove === 'same episode')
      why = `a miss of a request in flight with an earlier one: tightened by a quarter step (measured ${pct(within / measured)})`;
    else if (this.#lastMove === 'starved')
      why = `a must-stay request missed its SLO behind admitted ones: tightened (measured ${pct(within / measured)}, ${starved} such in the window)`;
    else if (this.#lastMove === 'loosened with time')
      why = `no miss in the last ${this.options.windowMs / 1000}s and admissions planned far below the aim: loosening with time`;
    else
      why = `measured ${pct(within / measured)}${planned ? `, planned ${pct(1 - plannedMiss / planned)}` : ''} against aim ${pct(1 - this.aimMiss)}: loosening, ${pct(Math.max(0, budgetLeft))} of the budget left`;
    return {
      target: this.target,
      aim: 1 - this.aimMiss,
      quantile,
      measured,
      within,
      attainment: measured ? within / measured : NaN,
      budgetLeft,
      plannedMiss: planned ? plannedMiss / planned : NaN,
      starved,
      why,
    };
  }

  #bounded(logMiss: number): number {
    return Math.min(this.#maxLogMiss, Math.max(this.#minLogMiss, logMiss));
  }

  #budgetLeft(now: number): number {
    const { measured, within } = this.#window(now);
    if (measured === 0) return 1;
    const allowed = measured * (1 - this.target);
    return 1 - (measured - within) / allowed;
  }

  /** The bucket for `now`, cleared if it last held an older time span. */
  #bucket(now: number): number {
    const width = this.options.bucketMs;
    const span = Math.floor(now / width);
    const i = ((span % this.#start.length) + this.#start.length) % this.#start.length;
    if (this.#start[i] !== span * width) {
      this.#start[i] = span * width;
      this.#measured[i] = 0;
      this.#within[i] = 0;
      this.#planned[i] = 0;
      this.#plannedMiss[i] = 0;
      this.#starved[i] = 0;
    }
    return i;
  }

  /** The window's counts, or those of its last `spanMs`. */
  #window(
    now: number,
    spanMs = this.options.windowMs,
  ): { measured: number; within: number; planned: number; plannedMiss: number; starved: number } {
    let measured = 0;
    let within = 0;
    let planned = 0;
    let plannedMiss = 0;
    let starved = 0;
    const from = now - spanMs;
    for (let i = 0; i < this.#start.length; i++) {
      if (this.#start[i] > from && this.#start[i] <= now) {
        measured += this.#measured[i];
        within += this.#within[i];
        planned += this.#planned[i];
        plannedMiss += this.#plannedMiss[i];
        starved += this.#starved[i];
      }
    }
    return { measured, within, planned, plannedMiss, starved };
  }
}

const clamp01 = (x: number) => Math.min(1, Math.max(0, x));

/** How often, at most, the loop looks whether its window is clean (two passes over its buckets). */
const CLEAN_CHECK_MS = 100;

/** One loop per policy (the policies' targets and SLOs differ), created on first use. */
export class AdmissionThresholds {
  readonly #loops = new Map<string, AdmissionThreshold>();
  readonly #options: Partial<ThresholdOptions>;
  /** Bound on the number of loops kept (policies are few; names come from configuration). */
  readonly #maxPolicies: number;

  constructor(options: Partial<ThresholdOptions> = {}, maxPolicies = 256) {
    this.#options = options;
    this.#maxPolicies = maxPolicies;
  }

  /** The loop for `policy` at `target`; a changed target starts a new loop. */
  for(policy: string, target: number): AdmissionThreshold {
    let loop = this.#loops.get(policy);
    if (!loop || loop.target !== target) {
      if (!loop && this.#loops.size >= this.#maxPolicies) {
        const oldest = this.#loops.keys().next().value;
        if (oldest !== undefined) this.#loops.delete(oldest);
      }
      loop = new AdmissionThreshold(target, this.#options);
      this.#loops.set(policy, loop);
    }
    return loop;
  }

  state(policy: string, target: number, now: number): ThresholdState {
    return this.for(policy, target).state(now);
  }

  states(now: number): { policy: string; state: ThresholdState }[] {
    return [...this.#loops].map(([policy, loop]) => ({ policy, state: loop.state(now) }));
  }
}
