// The per-origin counter store behind the budget ledger (see ledger.ts for the model): every
// origin's counters, each origin the only writer of its own, merged by version (newer replaces,
// never adds), and indexed by tenant + window + epoch so a budget check sums one small map.
// Bounded: counters or origins that do not fit are dropped and counted. Pure: time comes in as `now`.
import { BUDGET_WINDOWS, WINDOW_MS, type BudgetLimit, type BudgetWindow } from './limits.ts';
import { epochOf, epochsAt } from './epochs.ts';

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
  /** The origin's signature over this counter (agent/budget/signing.ts); kept to relay. */
  signature?: Uint8Array;
}

export interface CounterStoreOptions {
  /** This agent instance: the one origin whose counters this store writes. */
  origin: string;
  /** A silent origin's pending reservations stop counting after this long. */
  pendingTtlMs: number;
  /** Bound on counters held over all origins. */
  maxCounters: number;
  /** Bound on origins held. */
  maxOrigins: number;
  /**
   * What one origin could have overflowed at most (tokens and requests a second): another
   * origin's counter beyond that since its window began is a lie or a broken agent, and is
   * dropped and counted (`implausible`), so one datagram cannot spend a tenant's whole budget.
   */
  maxRate?: { tokensPerSecond: number; requestsPerSecond: number };
  /** A newer counter of another origin arrived `lateMs` after its origin changed it (by the origin's clock): how old the news gossip brings is. */
  onNews?: (lateMs: number, now: number) => void;
}

/** Far above any one agent's overflow (a provider's whole account rarely reaches 10^6 tokens/s). */
export const DEFAULT_MAX_RATE = { tokensPerSecond: 2_000_000, requestsPerSecond: 10_000 } as const;
/** Clock skew between agents: a window seen from another agent may have begun this much earlier. */
const WINDOW_SKEW_MS = 60_000;

interface OriginState {
  version: number;
  /** The origin's signature of `version` as its head, when no counter held is at it (signing.ts). */
  head?: Uint8Array;
  /** Local time of the last news from the origin (our own: always now). */
  heardAt: number;
  counters: Map<string, Counter>;
}

/** Counter key: window and epoch first so pruneEnded() can test without parsing. */
function keyOf(k: CounterKey): string {
  return `${k.window}\u0000${k.epoch}\u0000${k.tenant}\u0000${k.provider}`;
}

function scopeKey(tenant: string, window: BudgetWindow, epoch: number): string {
  return `${tenant}\u0000${window}\u0000${epoch}`;
}

export class CounterStore {
  readonly #o: CounterStoreOptions;
  readonly #origins = new Map<string, OriginState>();
  /** tenant+window+epoch → every origin's counters for it (per provider): what a check sums. */
  readonly #scopes = new Map<string, Map<string, { origin: string; counter: Counter }>>();
  #counters = 0;
  /** Counters or origins dropped because a bound was reached, or malformed input. */
  dropped = 0;
  /** Of those, counters beyond what their origin could have spent (see maxRate). */
  implausible = 0;
  /** Grows on every change this replica takes (own or merged): a digest cached at one revision is still exact. */
  revision = 0;
  #versions: { revision: number; map: Map<string, number> } | undefined;

  constructor(options: CounterStoreOptions, now: number) {
    this.#o = options;
    this.#origins.set(options.origin, { version: 0, heardAt: now, counters: new Map() });
  }

  /** Origin → highest version held: what to put in a digest. Built once per revision (read-only). */
  versions(): ReadonlyMap<string, number> {
    if (this.#versions?.revision !== this.revision)
      this.#versions = {
        revision: this.revision,
        map: new Map([...this.#origins].map(([origin, s]) => [origin, s.version])),
      };
    return this.#versions.map;
  }

  /** Whether this counter's change (or a later one) is held already: merging it would change nothing. */
  holds(origin: string, c: Counter): boolean {
    const held = this.#origins.get(origin)?.counters.get(keyOf(c));
    return held !== undefined && held.version >= c.version;
  }

  /** The head signature held for an origin's version, if any (see OriginState.head). */
  head(origin: string): Uint8Array | undefined {
    return this.#origins.get(origin)?.head;
  }

  /** An origin's counters changed after `since`, oldest change first: a prefix is gap-free. */
  deltaSince(origin: string, since: number): Counter[] {
    const state = this.#origins.get(origin);
    if (!state || state.version <= since) return [];
    return [...state.counters.values()].filter((c) => c.version > since).sort((a, b) => a.version - b.version);
  }

  /** See BudgetLedger.merge: another origin's counters changed in (from, to]; false if refused. */
  merge(
    origin: string,
    from: number,
    to: number,
    counters: readonly Counter[],
    now: number,
    head?: Uint8Array,
  ): boolean {
    if (origin === this.#o.origin) return false;
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
    if (to > state.version) {
      state.version = to;
      state.head = head;
      this.revision++;
    }
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
      if (!this.#plausible(counter, now)) {
        this.dropped++;
        this.implausible++;
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
      this.#o.onNews?.(Math.max(0, now - counter.changedAt), now);
      if (held)
        Object.assign(held, counter, { signature: counter.signature }); // never a stale signature
      else this.#add(origin, state, key, { ...counter });
    }
    return true;
  }

  /** Within what one origin could have spent since the counter's window began (with skew to spare). */
  #plausible(c: Counter, now: number): boolean {
    const rate = this.#o.maxRate ?? DEFAULT_MAX_RATE;
    const seconds = (Math.max(0, now - c.epoch * WINDOW_MS[c.window]) + WINDOW_SKEW_MS) / 1000;
    return (
      c.tokens + c.pendingTokens <= rate.tokensPerSecond * seconds &&
      c.requests + c.pendingRequests <= rate.requestsPerSecond * seconds
    );
  }

  /** Counters refused before they reached the store (their origin is no live, signed gossip origin). */
  refuse(counters: number): void {
    this.dropped += counters;
  }

  /** The origin is alive (a gossip heartbeat without budget news). */
  heard(origin: string, now: number): void {
    const state = this.#origins.get(origin);
    if (state) state.heardAt = now;
  }

  /** Drop counters of ended windows, and other origins with nothing left. */
  pruneEnded(now: number): void {
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
      if (origin !== this.#o.origin && state.counters.size === 0) {
        this.#origins.delete(origin);
        this.revision++;
      }
    }
  }

  get size(): { origins: number; counters: number } {
    return { origins: this.#origins.size, counters: this.#counters };
  }

  /** Change this origin's counter for `key` by the given amounts; it takes the origin's next version. */
  bump(
    key: CounterKey,
    tokens: number,
    requests: number,
    pendingTokens: number,
    pendingRequests: number,
    now: number,
  ): void {
    const own = this.#origins.get(this.#o.origin)!;
    own.heardAt = now;
    const id = keyOf(key);
    let counter = own.counters.get(id);
    if (!counter) {
      // Own counters are never dropped for the bound: they are the only copy of what we spent.
      counter = { ...key, tokens: 0, requests: 0, pendingTokens: 0, pendingRequests: 0, version: 0, changedAt: now };
      this.#add(this.#o.origin, own, id, counter);
    }
    counter.tokens += tokens;
    counter.requests += requests;
    counter.pendingTokens = Math.max(0, counter.pendingTokens + pendingTokens);
    counter.pendingRequests = Math.max(0, counter.pendingRequests + pendingRequests);
    counter.version = ++own.version;
    this.revision++;
    counter.changedAt = now;
    delete counter.signature; // signed again when next sent
  }

  /**
   * The cluster's usage of one tenant's window (and provider, if the limit names one), summed
   * over origins (or one origin's); pending reservations count unless their origin has been
   * silent too long.
   */
  used(
    tenant: string,
    limit: Pick<BudgetLimit, 'window' | 'provider'>,
    epoch: number,
    now: number,
    withPending = true,
    onlyOrigin?: string,
  ): { tokens: number; requests: number } {
    let tokens = 0;
    let requests = 0;
    for (const { origin, counter: c } of this.#scopes.get(scopeKey(tenant, limit.window, epoch))?.values() ?? []) {
      if (limit.provider !== undefined && c.provider !== limit.provider) continue;
      if (onlyOrigin !== undefined && origin !== onlyOrigin) continue;
      tokens += c.tokens;
      requests += c.requests;
      if (
        withPending &&
        (origin === this.#o.origin || now - this.#origins.get(origin)!.heardAt <= this.#o.pendingTtlMs)
      ) {
        tokens += c.pendingTokens;
        requests += c.pendingRequests;
      }
    }
    return { tokens, requests };
  }

  /** Other origins whose counter for this tenant's window changed within `activeMs`: who else is spending. */
  otherSpenders(tenant: string, limit: BudgetLimit, epoch: number, now: number, activeMs: number): number {
    const spenders = new Set<string>();
    for (const { origin, counter: c } of this.#scopes.get(scopeKey(tenant, limit.window, epoch))?.values() ?? []) {
      if (origin === this.#o.origin || (limit.provider !== undefined && c.provider !== limit.provider)) continue;
      if (now - c.changedAt <= activeMs) spenders.add(origin);
    }
    return spenders.size;
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
}

const MAX_NAME = 253;

/** A counter from gossip is believed only if every field is one a real agent could have written. */
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
