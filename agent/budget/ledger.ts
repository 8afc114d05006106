// The overflow budget ledger: what every agent has overflowed, per tenant, window and provider,
// summed over the cluster without a central store. Pure: time comes in as `now`.
//
// Counting. Each agent instance (origin) is the only writer of its own counters, one per
// (tenant, window, epoch, provider); epoch = floor(wall-clock ms / window length), so every agent
// agrees on which window a request falls into (to within clock skew). A counter only grows
// within its epoch (tokens and requests settled) except its pending part (reservations not yet
// settled). Every change takes the origin's next version; a replica keeps, per counter, the
// highest version it has seen. The cluster's usage is the sum over origins, exact once the
// replicas hold the same versions, whatever the order or repetition of messages (a G-counter
// per origin: merge = keep the newer version, never add).
//
// Restarts: an agent does NOT try to recover its old counts. Every start is a new origin
// (`agent/incarnation`); the previous incarnation's counters stay in every replica, frozen, until
// their window ends, and the new one starts from zero. So a restart can neither double-count
// (the old counters are never re-sent under a new name) nor lose a counted token (peers keep
// the old origin, and the new agent learns it from them). Recovering its own origin instead
// would need every peer to answer before the first write: a new origin only needs to hear the
// cluster once before it spends, hence `warmupMs` (see reserve()). A pending reservation of an
// origin nobody has heard from for `pendingTtlMs` is no longer counted (its agent is gone).
//
// Partitions: each side keeps counting its own origins; on healing, merging by version gives the
// exact sum of both sides. During a partition each side enforces on what it sees, so the
// overshoot can reach what the other side spends meanwhile (documented in the README).
//
// Enforcement, reserve before and settle after: a request may overflow when, for every limit
// that applies, the cluster's usage (settled + pending, as this replica sees it) plus its
// estimate stays within the limit, and this agent's recent admissions stay within its share of
// what remains (see #shareOk). settle() replaces the estimate with the provider's usage;
// release() drops it when nothing was sent. The worst-case overshoot is what agents admit
// during one convergence interval without seeing each other: (N − 1) × remaining on the sum
// alone. The share rule (1/k per interval among k known spenders) and the slow start (a new
// spender begins at 1/N and doubles per interval) bound what N blind agents admit together by
// what remained (README: "Overflow budgets and priority"; bench:budget measures it).
import { WINDOW_MS, BUDGET_WINDOWS, type BudgetLimit, type BudgetWindow, scopeName } from './limits.ts';

export interface CounterKey {
  tenant: string;
  window: BudgetWindow;
  epoch: number;
  provider: string;
}

export interface Counter extends CounterKey {
  tokens: number;
  requests: number;
  pendingTokens: number;
  pendingRequests: number;
  /** Origin version at which this counter last changed. */
  version: number;
  /** Origin's wall clock (ms) at that change: who is spending right now (the share rule). */
  changedAt: number;
}

export interface LedgerOptions {
  /** This agent instance: node or pod name plus an incarnation unique to this start. */
  origin: string;
  /** How long until a change is known to every agent (gossip: ≈ 2 s at 1,000 agents). */
  convergenceMs: number;
  /** A new origin does not spend budget before this long after start unless markSynced() says it heard the cluster. */
  warmupMs: number;
  /** A silent origin's pending reservations stop counting after this long. */
  pendingTtlMs: number;
  /** Bound on counters held over all origins; what does not fit is dropped and counted. */
  maxCounters: number;
  /** Bound on origins held. */
  maxOrigins: number;
  /** Wall clock (ms since the epoch): windows are calendar windows, so every agent agrees on them. */
  now: () => number;
  /** false: enforce on the cluster sum alone, without the share rule (bench:budget compares both). Default true. */
  shareRule?: boolean;
  /** Agents alive in the cluster now (gossip membership), for the slow start; default 1 (no slow start). */
  agents?: () => number;
}

export const DEFAULT_LEDGER_LIMITS = {
  warmupMs: 3000,
  pendingTtlMs: 60_000,
  maxCounters: 100_000,
  maxOrigins: 4096,
} as const;

export interface Reservation {
  readonly tenant: string;
  readonly provider: string;
  readonly tokens: number;
  /** The epoch of each window when reserved: the spend belongs there, even if settled later. */
  readonly epochs: Readonly<Record<BudgetWindow, number>>;
  done: boolean;
}

export type Admission =
  | { ok: true; reservation: Reservation }
  | {
      ok: false;
      reason: 'exhausted' | 'share' | 'warming';
      /** `hour`, `day/bedrock`: the limit that refused. */
      scope: string;
      /** When asking again can succeed: the end of the refusing window (exhausted), one convergence interval (share), or the end of warm-up. */
      retryAfterMs: number;
      message: string;
    };

export interface LimitState {
  limit: BudgetLimit;
  scope: string;
  epoch: number;
  usedTokens: number;
  usedRequests: number;
  remainingTokens?: number;
  remainingRequests?: number;
  /** Wall-clock ms when the window refills. */
  resetsAt: number;
}

interface OriginState {
  version: number;
  /** Local time of the last news from the origin (our own: always now). */
  heardAt: number;
  counters: Map<string, Counter>;
}

interface RecentAdmission {
  at: number;
  reservation: Reservation;
}

/** Counter key: window and epoch first so prune() can test without parsing. */
function keyOf(k: CounterKey): string {
  return `${k.window}\u0000${k.epoch}\u0000${k.tenant}\u0000${k.provider}`;
}

/** An origin whose counter changed this many convergence intervals ago still counts as spending (a steady spender refreshes well within it). */
const SPENDER_ACTIVE_INTERVALS = 4;

function scopeKey(tenant: string, window: BudgetWindow, epoch: number): string {
  return `${tenant}\u0000${window}\u0000${epoch}`;
}

export function epochOf(window: BudgetWindow, at: number): number {
  return Math.floor(at / WINDOW_MS[window]);
}

export class BudgetLedger {
  readonly origin: string;
  readonly #o: LedgerOptions;
  readonly #origins = new Map<string, OriginState>();
  /** tenant+window+epoch → every origin's counters for it (per provider): what a check sums. */
  readonly #scopes = new Map<string, Map<string, { origin: string; counter: Counter }>>();
  #recent: RecentAdmission[] = [];
  /** Per tenant: since when this agent has been spending without a pause (the slow start), and its last admission. */
  readonly #streaks = new Map<string, { since: number; last: number }>();
  readonly #startedAt: number;
  #synced = false;
  #counters = 0;
  /** Counters or origins dropped because a bound was reached, or malformed input. */
  dropped = 0;
  /** Grows on every change this replica takes (own or merged): a digest cached at one revision is still exact. */
  revision = 0;

  constructor(options: LedgerOptions) {
    this.#o = options;
    this.origin = options.origin;
    this.#startedAt = options.now();
    this.#origins.set(this.origin, { version: 0, heardAt: this.#startedAt, counters: new Map() });
  }

  /** The agent has exchanged state with a peer: it now sees what the cluster counted. */
  markSynced(): void {
    this.#synced = true;
  }

  /** Warm-up ends on the first sync, or after warmupMs (a lone agent has no peer to hear). */
  get warm(): boolean {
    return this.#synced || this.#o.now() - this.#startedAt >= this.#o.warmupMs;
  }

  /**
   * Reserve `tokens` (the estimate: prompt + the most the completion may take) of the tenant's
   * budget for overflow to `provider`, if every applicable limit allows. Counted at once, as
   * pending, in this origin's counters, so peers see it before it settles.
   */
  reserve(tenant: string, provider: string, tokens: number, limits: readonly BudgetLimit[]): Admission {
    const refusal = this.check(tenant, provider, tokens, limits);
    if (refusal) return refusal;
    const now = this.#o.now();
    const epochs = epochsAt(now);
    for (const window of BUDGET_WINDOWS) {
      this.#bump({ tenant, window, epoch: epochs[window], provider }, 0, 0, tokens, 1, now);
    }
    const reservation: Reservation = { tenant, provider, tokens, epochs, done: false };
    this.#recent.push({ at: now, reservation });
    const streak = this.#streaks.get(tenant);
    if (streak && now - streak.last <= this.#activeMs) streak.last = now;
    else this.#streaks.set(tenant, { since: now, last: now });
    return { ok: true, reservation };
  }

  /** Why reserve() would refuse now (undefined: it would admit); changes nothing that counts. */
  check(
    tenant: string,
    provider: string,
    tokens: number,
    limits: readonly BudgetLimit[],
  ): Extract<Admission, { ok: false }> | undefined {
    const now = this.#o.now();
    const applicable = limits.filter((l) => l.provider === undefined || l.provider === provider);
    if (applicable.length > 0 && !this.warm) {
      return {
        ok: false,
        reason: 'warming',
        scope: scopeName(applicable[0]),
        retryAfterMs: this.#startedAt + this.#o.warmupMs - now,
        message: 'this agent has just started and has not yet heard what the cluster spent',
      };
    }
    this.#pruneRecent(now);
    for (const limit of applicable) {
      const refusal = this.#refusal(tenant, provider, tokens, limit, now);
      if (refusal) return refusal;
    }
    return undefined;
  }

  /** The provider answered: count what it reports instead of the estimate. Idempotent. */
  settle(reservation: Reservation, usedTokens: number): void {
    this.#finish(reservation, Math.max(0, Math.round(usedTokens)), 1);
  }

  /** Nothing was sent (or the provider refused before any work): the estimate goes back. Idempotent. */
  release(reservation: Reservation): void {
    this.#finish(reservation, 0, 0);
  }

  /** Usage and what remains for each limit, as this replica sees the cluster now. */
  state(tenant: string, limits: readonly BudgetLimit[]): LimitState[] {
    const now = this.#o.now();
    return limits.map((limit) => {
      const epoch = epochOf(limit.window, now);
      const used = this.#used(tenant, limit, epoch, now);
      return {
        limit,
        scope: scopeName(limit),
        epoch,
        usedTokens: used.tokens,
        usedRequests: used.requests,
        ...(limit.tokens !== undefined ? { remainingTokens: Math.max(0, limit.tokens - used.tokens) } : {}),
        ...(limit.requests !== undefined ? { remainingRequests: Math.max(0, limit.requests - used.requests) } : {}),
        resetsAt: (epoch + 1) * WINDOW_MS[limit.window],
      };
    });
  }

  /** Settled usage of one tenant in the current window, every origin and provider (metrics, dashboard). */
  spent(tenant: string, window: BudgetWindow): { tokens: number; requests: number } {
    const now = this.#o.now();
    return this.#used(tenant, { window }, epochOf(window, now), now, false);
  }

  // --- replication -------------------------------------------------------------------------

  /** Origin → highest version held: what to put in a digest. */
  versions(): Map<string, number> {
    return new Map([...this.#origins].map(([origin, s]) => [origin, s.version]));
  }

  /** An origin's counters changed after `since`, oldest change first: a prefix is gap-free. */
  deltaSince(origin: string, since: number): Counter[] {
    const state = this.#origins.get(origin);
    if (!state || state.version <= since) return [];
    return [...state.counters.values()].filter((c) => c.version > since).sort((a, b) => a.version - b.version);
  }

  /**
   * Apply counters of another origin (from gossip) that changed in (from, to]. Newer versions
   * replace older ones; anything about our own origin, an ended window, or past the bounds is
   * ignored. A delta starting past the version we hold would leave a gap we would never ask for
   * again: it is refused (false), and the next exchange asks from where we are.
   */
  merge(origin: string, from: number, to: number, counters: readonly Counter[]): boolean {
    if (origin === this.origin) return false;
    const now = this.#o.now();
    let state = this.#origins.get(origin);
    if ((state?.version ?? 0) < from) return false;
    if (!state) {
      if (this.#origins.size >= this.#o.maxOrigins) {
        this.dropped += counters.length;
        return false;
      }
      state = { version: 0, heardAt: now, counters: new Map() };
      this.#origins.set(origin, state);
    }
    state.heardAt = now;
    state.version = Math.max(state.version, to);
    for (const counter of counters) {
      // Ended windows are gone everywhere; a window more than one ahead is a broken clock or a lie.
      if (
        !validCounter(counter) ||
        counter.version <= from ||
        counter.version > to ||
        counter.epoch < epochOf(counter.window, now) ||
        counter.epoch > epochOf(counter.window, now) + 1
      ) {
        this.dropped++;
        continue;
      }
      const key = keyOf(counter);
      const held = state.counters.get(key);
      if (held && held.version >= counter.version) continue;
      if (!held && this.#counters >= this.#o.maxCounters) {
        this.dropped++;
        continue;
      }
      this.revision++;
      if (held) Object.assign(held, counter);
      else this.#add(origin, state, key, { ...counter });
    }
    return true;
  }

  /** The origin is alive (a gossip heartbeat without budget news). */
  heard(origin: string): void {
    const state = this.#origins.get(origin);
    if (state) state.heardAt = this.#o.now();
  }

  /** Drop counters of ended windows, and origins with nothing left. Call once per gossip round. */
  prune(): void {
    const now = this.#o.now();
    const current = epochsAt(now);
    for (const [origin, state] of this.#origins) {
      for (const [key, counter] of state.counters) {
        if (counter.epoch < current[counter.window]) {
          state.counters.delete(key);
          this.#counters--;
          const scope = scopeKey(counter.tenant, counter.window, counter.epoch);
          const entries = this.#scopes.get(scope);
          entries?.delete(`${origin}\u0000${counter.provider}`);
          if (entries?.size === 0) this.#scopes.delete(scope);
        }
      }
      if (origin !== this.origin && state.counters.size === 0) this.#origins.delete(origin);
    }
    for (const [tenant, streak] of this.#streaks) if (now - streak.last > this.#activeMs) this.#streaks.delete(tenant);
    this.#pruneRecent(now);
  }

  /** Counters and origins held (bounded memory, for /debug/state). */
  get size(): { origins: number; counters: number } {
    return { origins: this.#origins.size, counters: this.#counters };
  }

  // --- internals ---------------------------------------------------------------------------

  #refusal(
    tenant: string,
    provider: string,
    tokens: number,
    limit: BudgetLimit,
    now: number,
  ): Extract<Admission, { ok: false }> | undefined {
    const epoch = epochOf(limit.window, now);
    const used = this.#used(tenant, limit, epoch, now);
    const scope = scopeName(limit);
    const resetsIn = (epoch + 1) * WINDOW_MS[limit.window] - now;
    const over =
      (limit.tokens !== undefined && used.tokens + tokens > limit.tokens) ||
      (limit.requests !== undefined && used.requests + 1 > limit.requests);
    if (over) {
      return {
        ok: false,
        reason: 'exhausted',
        scope,
        retryAfterMs: resetsIn,
        message: `tenant ${tenant} has used ${used.tokens} tokens and ${used.requests} requests of its ${scope} overflow budget (${describeLimit(limit)})`,
      };
    }
    if (this.#o.shareRule !== false && !this.#shareOk(tenant, provider, tokens, limit, epoch, used, now)) {
      return {
        ok: false,
        reason: 'share',
        scope,
        retryAfterMs: Math.min(this.#o.convergenceMs, resetsIn),
        message: `tenant ${tenant}'s ${scope} overflow budget is nearly spent and other agents are spending it too: this agent's share for now is used`,
      };
    }
    return undefined;
  }

  /**
   * The share rule: k origins are spending this tenant's budget right now (changed within the
   * last few convergence intervals, this one included), so in any convergence interval this agent
   * admits at most 1/k of what remained before it. While every spender knows the others, they
   * together admit at most what remained: no overshoot from not yet seeing each other's last
   * admissions. Only a spender that no one has heard from yet can overshoot (see the README).
   */
  #shareOk(
    tenant: string,
    provider: string,
    tokens: number,
    limit: BudgetLimit,
    epoch: number,
    used: { tokens: number; requests: number },
    now: number,
  ): boolean {
    const k = 1 + this.#otherSpenders(tenant, limit, epoch, now);
    // Slow start: an agent that starts spending cannot know who else just started (their news
    // is not here yet). It begins at 1/(agents alive) of what remains and doubles its share each
    // convergence interval, by when it hears of those that started with it. If all N start at
    // once blind, together they admit at most what remained in the first interval.
    const streak = this.#streaks.get(tenant);
    const intervals =
      streak && now - streak.last <= this.#activeMs ? Math.floor((now - streak.since) / this.#o.convergenceMs) : 0;
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
    const tokensOk =
      limit.tokens === undefined || mineTokens + tokens <= (limit.tokens - used.tokens + mineTokens) * share;
    const requestsOk =
      limit.requests === undefined || mineRequests + 1 <= (limit.requests - used.requests + mineRequests) * share;
    return tokensOk && requestsOk;
  }

  #otherSpenders(tenant: string, limit: BudgetLimit, epoch: number, now: number): number {
    const spenders = new Set<string>();
    for (const { origin, counter: c } of this.#scopes.get(scopeKey(tenant, limit.window, epoch))?.values() ?? []) {
      if (origin === this.origin || (limit.provider !== undefined && c.provider !== limit.provider)) continue;
      if (now - c.changedAt <= this.#activeMs) spenders.add(origin);
    }
    return spenders.size;
  }

  #used(
    tenant: string,
    limit: Pick<BudgetLimit, 'window' | 'provider'>,
    epoch: number,
    now: number,
    withPending = true,
  ): { tokens: number; requests: number } {
    let tokens = 0;
    let requests = 0;
    for (const { origin, counter: c } of this.#scopes.get(scopeKey(tenant, limit.window, epoch))?.values() ?? []) {
      if (limit.provider !== undefined && c.provider !== limit.provider) continue;
      tokens += c.tokens;
      requests += c.requests;
      if (withPending && (origin === this.origin || now - this.#origins.get(origin)!.heardAt <= this.#o.pendingTtlMs)) {
        tokens += c.pendingTokens;
        requests += c.pendingRequests;
      }
    }
    return { tokens, requests };
  }

  #finish(reservation: Reservation, tokens: number, requests: number): void {
    if (reservation.done) return;
    reservation.done = true;
    const now = this.#o.now();
    for (const window of BUDGET_WINDOWS) {
      const epoch = reservation.epochs[window];
      // The window ended while the request ran: its counters are gone everywhere, so is the spend.
      if (epoch < epochOf(window, now)) continue;
      this.#bump(
        { tenant: reservation.tenant, window, epoch, provider: reservation.provider },
        tokens,
        requests,
        -reservation.tokens,
        -1,
        now,
      );
    }
    // A released reservation spent nothing: it no longer uses this agent's share either.
    if (requests === 0) this.#recent = this.#recent.filter((r) => r.reservation !== reservation);
  }

  #bump(
    key: CounterKey,
    tokens: number,
    requests: number,
    pendingTokens: number,
    pendingRequests: number,
    now: number,
  ): void {
    const own = this.#origins.get(this.origin)!;
    own.heardAt = now;
    const id = keyOf(key);
    let counter = own.counters.get(id);
    if (!counter) {
      // Own counters are never dropped for the bound: they are the only copy of what we spent.
      counter = { ...key, tokens: 0, requests: 0, pendingTokens: 0, pendingRequests: 0, version: 0, changedAt: now };
      this.#add(this.origin, own, id, counter);
    }
    counter.tokens += tokens;
    counter.requests += requests;
    counter.pendingTokens = Math.max(0, counter.pendingTokens + pendingTokens);
    counter.pendingRequests = Math.max(0, counter.pendingRequests + pendingRequests);
    counter.version = ++own.version;
    this.revision++;
    counter.changedAt = now;
  }

  #add(origin: string, state: OriginState, key: string, counter: Counter): void {
    state.counters.set(key, counter);
    this.#counters++;
    const scope = scopeKey(counter.tenant, counter.window, counter.epoch);
    let entries = this.#scopes.get(scope);
    if (!entries) {
      entries = new Map();
      this.#scopes.set(scope, entries);
    }
    entries.set(`${origin}\u0000${counter.provider}`, { origin, counter });
  }

  get #activeMs(): number {
    return SPENDER_ACTIVE_INTERVALS * this.#o.convergenceMs;
  }

  #pruneRecent(now: number): void {
    if (this.#recent.length > 0 && now - this.#recent[0].at > this.#o.convergenceMs) {
      this.#recent = this.#recent.filter((r) => now - r.at <= this.#o.convergenceMs);
    }
  }
}

function epochsAt(now: number): Record<BudgetWindow, number> {
  return { minute: epochOf('minute', now), hour: epochOf('hour', now), day: epochOf('day', now) };
}

function describeLimit(limit: BudgetLimit): string {
  return [
    limit.tokens !== undefined ? `${limit.tokens} tokens` : '',
    limit.requests !== undefined ? `${limit.requests} requests` : '',
  ]
    .filter(Boolean)
    .join(', ');
}

const MAX_NAME = 253;

function validCounter(c: Counter): boolean {
  const count = (n: number) => Number.isSafeInteger(n) && n >= 0;
  return (
    (BUDGET_WINDOWS as readonly string[]).includes(c.window) &&
    typeof c.tenant === 'string' &&
    c.tenant.length > 0 &&
    c.tenant.length <= MAX_NAME &&
    typeof c.provider === 'string' &&
    c.provider.length > 0 &&
    c.provider.length <= MAX_NAME &&
    count(c.epoch) &&
    count(c.changedAt) &&
    count(c.tokens) &&
    count(c.requests) &&
    count(c.pendingTokens) &&
    count(c.pendingRequests) &&
    count(c.version) &&
    c.version > 0
  );
}
