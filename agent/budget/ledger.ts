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
// (`node#incarnation`, its gossip origin's); the previous incarnation's counters stay in every
// replica, frozen, until their window ends, and the new one starts from zero. So a restart can
// neither double-count (the old counters are never re-sent under a new name) nor lose a counted
// token (peers keep the old origin, and the new agent learns it from them). Recovering its own
// origin instead would need every peer to answer before the first write: a new origin only needs
// to hear the cluster once before it spends. Until then it is unsynced (see markSynced): it admits
// nothing for `warmupMs`, then at most 1/agents of each limit by its own count. A pending
// reservation of an origin nobody has heard from for `pendingTtlMs` is no longer counted.
//
// Partitions: each side keeps counting its own origins; on healing, merging by version gives the
// exact sum of both sides. During a partition each side enforces on what it sees, so the
// overshoot can reach what the other side spends meanwhile (docs/policy.md, "Overflow budgets and priority").
//
// Enforcement, reserve before and settle after: a request may overflow when, for every limit
// that applies, the cluster's usage (settled + pending, as this replica sees it) plus its
// estimate stays within the limit, and this agent's recent admissions stay within its share of
// what remains (see share-rule.ts). settle() replaces the estimate with the provider's usage;
// release() drops it when nothing was sent. The worst-case overshoot is what agents admit
// during one convergence interval without seeing each other: (N − 1) × remaining on the sum
// alone. The share rule (1/k per interval among k known spenders), the slow start (a new
// spender begins at 1/N and doubles per interval, and per full sweep with gossip) and the
// granularity draw (a share under one request admits one with probability share/request) bound
// it by what remained plus (k − 1) requests' estimates; an interval lasts at least as long as
// the latest news gossip brought took to arrive (share-rule.ts), so a cluster slower than
// convergenceMs does not take shares again on a view that still counts the others' as remaining (docs/policy.md, "Overflow budgets and priority";
// bench:budget measures it; test/agent-budget-cluster.test.ts checks it through three agents).
//
// Seams: window arithmetic in epochs.ts, the per-origin counters and their merge in
// counter-store.ts, the share rule and slow start in share-rule.ts; this file is the admission
// API (reserve, check, settle, release) that ties them together.
import { WINDOW_MS, BUDGET_WINDOWS, type BudgetLimit, type BudgetWindow, scopeName } from './limits.ts';
import { CounterStore, type Counter } from './counter-store.ts';
import { epochOf, epochsAt } from './epochs.ts';
import { ShareRule } from './share-rule.ts';
import type { Reservation } from './reservation.ts';

// Re-exported so importers keep taking the ledger's model from one place.
export type { Counter } from './counter-store.ts';
export type { Reservation } from './reservation.ts';

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
  /** Uniform in [0, 1) (default Math.random): gives out shares smaller than one request (share-rule.ts). */
  rand?: () => number;
  /** Full sweeps of the cluster's counters heard so far (agent/budget/exchange.ts); paces the slow start. */
  sweeps?: () => number;
}

export const DEFAULT_LEDGER_LIMITS = {
  warmupMs: 3000,
  pendingTtlMs: 60_000,
  maxCounters: 100_000,
  maxOrigins: 4096,
} as const;

export type Admission =
  | { ok: true; reservation: Reservation }
  | {
      ok: false;
      reason: 'exhausted' | 'share' | 'warming';
      /** `hour`, `day/bedrock`: the limit that refused. */
      scope: string;
      /** When asking again can succeed: the end of the refusing window (exhausted), one share interval (share), or the end of warm-up. */
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

export class BudgetLedger {
  readonly origin: string;
  readonly #o: LedgerOptions;
  readonly #store: CounterStore;
  readonly #share: ShareRule;
  readonly #startedAt: number;
  #synced = false;

  constructor(options: LedgerOptions) {
    this.#o = options;
    this.origin = options.origin;
    this.#startedAt = options.now();
    this.#share = new ShareRule(options);
    this.#store = new CounterStore(
      // What an unsynced agent catches up on measures its own absence, not how fast gossip converges.
      { ...options, onNews: (lateMs, now) => this.#synced && this.#share.news(lateMs, now) },
      this.#startedAt,
    );
  }

  /** Counters or origins dropped because a bound was reached, or malformed input. */
  get dropped(): number {
    return this.#store.dropped;
  }

  /** Grows on every change this replica takes (own or merged): a digest cached at one revision is still exact. */
  get revision(): number {
    return this.#store.revision;
  }

  /**
   * The agent sees what the cluster counted: a peer answered it in full (agent/budget/exchange.ts),
   * or there is no cluster (gossip off). Before that it admits nothing for warmupMs, then at most
   * 1/agents of each limit by its own count (partitioned, or its peers are slow to answer).
   */
  markSynced(): void {
    this.#synced = true;
  }

  /** Has this agent heard what the cluster counted (see markSynced)? */
  get synced(): boolean {
    return this.#synced;
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
    const current = epochsAt(now);
    // Only the windows some limit of the tenant uses are counted (a third of the gossip per
    // window left out); a limit added mid-window counts from then on.
    const epochs: Partial<Record<BudgetWindow, number>> = {};
    for (const window of BUDGET_WINDOWS) {
      if (!limits.some((l) => l.window === window)) continue;
      epochs[window] = current[window];
      this.#store.bump({ tenant, window, epoch: current[window], provider }, 0, 0, tokens, 1, now);
    }
    const reservation: Reservation = { tenant, provider, tokens, epochs, done: false };
    this.#share.admitted(reservation, now);
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
    if (applicable.length > 0 && !this.#synced && now - this.#startedAt < this.#o.warmupMs) {
      return {
        ok: false,
        reason: 'warming',
        scope: scopeName(applicable[0]),
        retryAfterMs: this.#startedAt + this.#o.warmupMs - now,
        message: 'this agent has just started and has not yet heard what the cluster spent',
      };
    }
    this.#share.pruneRecent(now);
    for (const limit of applicable) {
      const refusal = this.#refusal(tenant, tokens, limit, now) ?? this.#unsyncedRefusal(tenant, tokens, limit, now);
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
      const used = this.#store.used(tenant, limit, epoch, now);
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
    return this.#store.used(tenant, { window }, epochOf(window, now), now, false);
  }

  // --- replication -------------------------------------------------------------------------

  /** Origin → highest version held: what to put in a digest (read-only; rebuilt when the ledger changes). */
  versions(): ReadonlyMap<string, number> {
    return this.#store.versions();
  }

  /** An origin's counters changed after `since`, oldest change first: a prefix is gap-free. */
  deltaSince(origin: string, since: number): Counter[] {
    return this.#store.deltaSince(origin, since);
  }

  /**
   * Apply counters of another origin (from gossip) that changed in (from, to]. Newer versions
   * replace older ones; anything about our own origin, an ended window, or past the bounds is
   * ignored. A delta starting past the version we hold would leave a gap we would never ask for
   * again: it is refused (false), and the next exchange asks from where we are.
   */
  merge(origin: string, from: number, to: number, counters: readonly Counter[], head?: Uint8Array): boolean {
    return this.#store.merge(origin, from, to, counters, this.#o.now(), head);
  }

  /** Whether a counter's change (or a later one) is held already (merge would skip it). */
  holds(origin: string, counter: Counter): boolean {
    return this.#store.holds(origin, counter);
  }

  /** The origin's signature of the version held as its head, when one came with it (agent/budget/signing.ts). */
  head(origin: string): Uint8Array | undefined {
    return this.#store.head(origin);
  }

  /** Counters of an origin gossip does not vouch for, dropped unread: counted with the rest. */
  refuse(counters: number): void {
    this.#store.refuse(counters);
  }

  /** The origin is alive (a gossip heartbeat without budget news). */
  heard(origin: string): void {
    this.#store.heard(origin, this.#o.now());
  }

  /** Drop counters of ended windows, and origins with nothing left. Call once per gossip round. */
  prune(): void {
    const now = this.#o.now();
    this.#store.pruneEnded(now);
    this.#share.prune(now);
  }

  /** Counters and origins held (bounded memory, for /debug/state). */
  get size(): { origins: number; counters: number } {
    return this.#store.size;
  }

  // --- internals ---------------------------------------------------------------------------

  #refusal(
    tenant: string,
    tokens: number,
    limit: BudgetLimit,
    now: number,
  ): Extract<Admission, { ok: false }> | undefined {
    const epoch = epochOf(limit.window, now);
    const used = this.#store.used(tenant, limit, epoch, now);
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
    if (
      this.#o.shareRule !== false &&
      !this.#share.allows(
        tenant,
        tokens,
        limit,
        used,
        this.#store.otherSpenders(tenant, limit, epoch, now, this.#share.activeMs),
        now,
      )
    ) {
      return {
        ok: false,
        reason: 'share',
        scope,
        retryAfterMs: Math.min(this.#share.intervalMs(now), resetsIn),
        message: `tenant ${tenant}'s ${scope} overflow budget is nearly spent and other agents are spending it too: this agent's share for now is used`,
      };
    }
    return undefined;
  }

  /**
   * Past warm-up without having heard the cluster in full (partitioned, or peers slow to answer):
   * it cannot tell what the others spent, so it spends at most 1/agents of the limit itself.
   * Each such agent overshoots by at most that share (docs/policy.md, "Overflow budgets": overshoot).
   */
  #unsyncedRefusal(
    tenant: string,
    tokens: number,
    limit: BudgetLimit,
    now: number,
  ): Extract<Admission, { ok: false }> | undefined {
    if (this.#synced) return undefined;
    const agents = Math.max(1, this.#o.agents?.() ?? 1);
    if (agents === 1) return undefined;
    const epoch = epochOf(limit.window, now);
    const own = this.#store.used(tenant, limit, epoch, now, true, this.origin);
    const over =
      (limit.tokens !== undefined && own.tokens + tokens > limit.tokens / agents) ||
      (limit.requests !== undefined && own.requests + 1 > limit.requests / agents);
    if (!over) return undefined;
    return {
      ok: false,
      reason: 'share',
      scope: scopeName(limit),
      retryAfterMs: Math.min(this.#o.convergenceMs, (epoch + 1) * WINDOW_MS[limit.window] - now),
      message: `this agent has not yet heard what the cluster spent of tenant ${tenant}'s ${scopeName(limit)} overflow budget: it spends at most 1/${agents} of it`,
    };
  }

  #finish(reservation: Reservation, tokens: number, requests: number): void {
    if (reservation.done) return;
    reservation.done = true;
    const now = this.#o.now();
    for (const window of BUDGET_WINDOWS) {
      const epoch = reservation.epochs[window];
      if (epoch === undefined) continue;
      // The window ended while the request ran: its counters are gone everywhere, so is the spend.
      if (epoch < epochOf(window, now)) continue;
      this.#store.bump(
        { tenant: reservation.tenant, window, epoch, provider: reservation.provider },
        tokens,
        requests,
        -reservation.tokens,
        -1,
        now,
      );
    }
    if (requests === 0) this.#share.released(reservation);
  }
}

function describeLimit(limit: BudgetLimit): string {
  return [
    limit.tokens !== undefined ? `${limit.tokens} tokens` : '',
    limit.requests !== undefined ? `${limit.requests} requests` : '',
  ]
    .filter(Boolean)
    .join(', ');
}
