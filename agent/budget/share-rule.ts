// The budget ledger's share rule and slow start: how much of what remains this agent may admit
// per convergence interval, so agents that cannot yet see each other's latest admissions
// together stay within the budget (see ledger.ts). Pure: time comes in as `now`.
import type { BudgetLimit } from './limits.ts';
import type { Reservation } from './reservation.ts';

/** An origin whose counter changed this many convergence intervals ago still counts as spending (a steady spender refreshes well within it). */
const SPENDER_ACTIVE_INTERVALS = 4;
/** Convergence intervals after which an admission or draw is past even if no sweep completed since. */
const SWEEP_STALL_INTERVALS = 4;

export interface ShareRuleOptions {
  /** How long until a change is known to every agent: the shortest interval a share is measured over (news() stretches it). */
  convergenceMs: number;
  /** Agents alive in the cluster now (gossip membership), for the slow start; default 1 (no slow start). */
  agents?: () => number;
  /** Uniform in [0, 1): the draw that gives out shares smaller than one request (default Math.random). */
  rand?: () => number;
  /**
   * Full sweeps so far: every origin heard in full from some peer (agent/budget/exchange.ts). With
   * it, the slow start doubles at most once per sweep as well as per convergence interval, so a
   * cluster that converges slower than assumed (a burst at 1,000 agents) does not double blind.
   */
  sweeps?: () => number;
}

interface RecentAdmission {
  at: number;
  /** Full sweeps completed when admitted. */
  sweeps: number;
  reservation: Reservation;
}

export class ShareRule {
  readonly #o: ShareRuleOptions;
  /** This agent's admissions within the last convergence interval. */
  #recent: RecentAdmission[] = [];
  /** Per tenant: since when this agent has been spending without a pause (the slow start), and its last admission. */
  readonly #streaks = new Map<string, { since: number; last: number; sweeps: number }>();
  /** Per convergence interval (floor(now / convergenceMs)): the latest news heard in it, ms after its origin's change. */
  readonly #late = new Map<number, number>();
  /** Per tenant and limit: the last draw for a share smaller than one request (when, sweeps then), and its outcome. */
  readonly #draws = new Map<string, { at: number; sweeps: number; won: boolean }>();

  constructor(options: ShareRuleOptions) {
    this.#o = options;
  }

  /** How recently a counter must have changed for its origin to count as spending. */
  get activeMs(): number {
    return SPENDER_ACTIVE_INTERVALS * this.#o.convergenceMs;
  }

  /**
   * Gossip brought a change `lateMs` after its origin made it. An interval lasts at least as long
   * as the latest news of the last few intervals took to arrive: when every peer is equally
   * behind (a burst through 1,000 agents), no sweep reveals it, but the age of what arrives does,
   * and a share taken again before the others' admissions of the last interval are here would be
   * taken on a view that still counts them as remaining.
   */
  news(lateMs: number, now: number): void {
    const bucket = Math.floor(now / this.#o.convergenceMs);
    if (lateMs > (this.#late.get(bucket) ?? 0)) this.#late.set(bucket, lateMs);
  }

  /** The interval a share is measured over now: convergenceMs, or the measured age of news if longer (at most SWEEP_STALL_INTERVALS × convergenceMs). */
  intervalMs(now: number): number {
    const c = this.#o.convergenceMs;
    const oldest = Math.floor(now / c) - SPENDER_ACTIVE_INTERVALS;
    let late = 0;
    for (const [bucket, ms] of this.#late) {
      if (bucket < oldest) this.#late.delete(bucket);
      else if (ms > late) late = ms;
    }
    return Math.min(SWEEP_STALL_INTERVALS * c, Math.max(c, late));
  }

  /** This agent admitted `reservation`: it uses this interval's share and extends the tenant's streak. */
  admitted(reservation: Reservation, now: number): void {
    this.#recent.push({ at: now, sweeps: this.#sweeps(), reservation });
    const streak = this.#streaks.get(reservation.tenant);
    if (streak && now - streak.last <= this.activeMs) streak.last = now;
    else this.#streaks.set(reservation.tenant, { since: now, last: now, sweeps: this.#o.sweeps?.() ?? 0 });
  }

  /** A released reservation spent nothing: it no longer uses this agent's share either. */
  released(reservation: Reservation): void {
    this.#recent = this.#recent.filter((r) => r.reservation !== reservation);
  }

  /**
   * The share rule: k origins are spending this tenant's budget right now (changed within the
   * last few convergence intervals, this one included), so in any convergence interval this agent
   * admits at most 1/k of what remained before it. While every spender knows the others, they
   * together admit at most what remained: no overshoot from not yet seeing each other's last
   * admissions. Only a spender that no one has heard from yet can overshoot (see docs/policy.md).
   */
  allows(
    tenant: string,
    tokens: number,
    limit: BudgetLimit,
    used: { tokens: number; requests: number },
    otherSpenders: number,
    now: number,
  ): boolean {
    const k = 1 + otherSpenders;
    // Slow start: an agent that starts spending cannot know who else just started (their news
    // is not here yet). It begins at 1/(agents alive) of what remains and doubles its share each
    // convergence interval (each full sweep, with gossip), by when it has heard of those that
    // started with it. If all N start at once blind, together they admit at most what remained
    // in the first interval.
    const streak = this.#streaks.get(tenant);
    const live = streak !== undefined && now - streak.last <= this.activeMs;
    // Doubling needs a convergence interval to have passed and, with gossip, a full sweep heard
    // for each doubling: a sweep is evidence that the others' news is here.
    const elapsed = Math.floor((now - (streak?.since ?? now)) / this.intervalMs(now));
    const intervals = !live ? 0 : Math.min(elapsed, this.#o.sweeps ? this.#o.sweeps() - streak.sweeps : elapsed);
    const share = Math.min(1 / k, 2 ** Math.min(intervals, 30) / Math.max(1, this.#o.agents?.() ?? 1));
    if (share >= 1) return true;
    let mineTokens = 0;
    let mineRequests = 0;
    for (const { reservation: r } of this.#recent) {
      if (r.tenant === tenant && (limit.provider === undefined || r.provider === limit.provider)) {
        mineTokens += r.tokens;
        mineRequests++;
      }
    }
    // What remained before this interval's own admissions (own usage is exact in `used`).
    const tokenShare = limit.tokens === undefined ? Infinity : (limit.tokens - used.tokens + mineTokens) * share;
    const requestShare =
      limit.requests === undefined ? Infinity : (limit.requests - used.requests + mineRequests) * share;
    if (mineTokens + tokens <= tokenShare && mineRequests + 1 <= requestShare) return true;
    if (mineRequests > 0) return false;
    // Granularity: a share smaller than one request would strand the rest of the budget (no
    // agent could ever admit again). Such an agent admits one request in this interval with
    // probability share / request, drawn once per interval: the k spenders together admit what
    // remained on average. Worst case (every draw won): k − 1 requests over (docs/policy.md: overshoot).
    const key = `${tenant}\u0000${limit.window}\u0000${limit.provider ?? ''}`;
    const drawn = this.#draws.get(key);
    if (drawn && !this.#past(drawn, now)) return drawn.won;
    const won = (this.#o.rand ?? Math.random)() < Math.min(tokenShare / tokens, requestShare);
    this.#draws.set(key, { at: now, sweeps: this.#sweeps(), won });
    return won;
  }

  /**
   * Forget admissions the others have heard of: older than one convergence interval and, with
   * gossip, older than a full sweep that started after them (two sweeps completed since). Until
   * then they use this interval's share: a cluster converging slower than C (a burst at 1,000
   * agents) would otherwise see every agent take its share again on a stale view of what remains.
   */
  pruneRecent(now: number): void {
    if (this.#recent.length > 0 && this.#past(this.#recent[0], now)) {
      this.#recent = this.#recent.filter((r) => !this.#past(r, now));
    }
  }

  /**
   * An admission or draw at `at` belongs to an interval that has passed (see pruneRecent). Sweeps
   * advance only while the exchange has news to carry; when they stall (every agent already holds
   * the same counters) a few intervals pass on time alone, or a share smaller than one request
   * would be drawn once and never again, stranding the rest of the budget.
   */
  #past(entry: { at: number; sweeps: number }, now: number): boolean {
    const age = now - entry.at;
    if (age <= this.intervalMs(now)) return false;
    return !this.#o.sweeps || this.#sweeps() >= entry.sweeps + 2 || age > SWEEP_STALL_INTERVALS * this.#o.convergenceMs;
  }

  #sweeps(): number {
    return this.#o.sweeps?.() ?? 0;
  }

  /** Drop ended streaks, old draws, old admissions and the age of old news. */
  prune(now: number): void {
    this.intervalMs(now);
    for (const [tenant, streak] of this.#streaks) if (now - streak.last > this.activeMs) this.#streaks.delete(tenant);
    for (const [key, drawn] of this.#draws) if (this.#past(drawn, now)) this.#draws.delete(key);
    this.pruneRecent(now);
  }
}
