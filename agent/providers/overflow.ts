// The overflow side of the agent, built from the providers' settings: which of a policy's
// providers may take a request now (the leave verdict), sending through them in order, and what
// their failure means for the client (502 vs 503). Providers are rebuilt when their settings change.
import type { Counter } from 'prom-client';
import { offClusterHeaders } from '../classify/headers.ts';
import { mayLeave } from '../policy/resolve.ts';
import type { LeaveVerdict } from '../route/router.ts';
import type { EffectivePolicy, ParsedRequest, RouteRequest } from '../types.ts';
import { BreakerSet } from './breaker.ts';
import { tryProviders, type Attempt } from './chain.ts';
import { createProvider } from './index.ts';
import type { ProviderSettings } from './types.ts';
import type { ClosableProvider } from './upstream.ts';
import type { OverflowBudget } from '../budget/spend.ts';
import type { AgentSettings } from '../config/load.ts';

/** What the overflow chain gives the request path: a provider's answer, or why there is none. */
export type OverflowResult =
  | { ok: true; response: Response }
  /** 503: no provider could be reached (refused, timed out, circuit open); 502: they answered badly. */
  | { ok: false; status: 502 | 503; message: string };

/** A provider's web Response with headers added (the overflow chain's answers). */
function withHeaders(response: Response, headers: Record<string, string>): Response {
  const merged = new Headers(response.headers);
  for (const [k, v] of Object.entries(headers)) merged.set(k, v);
  return new Response(response.body, { status: response.status, headers: merged });
}

export interface OverflowDeps {
  limits: { maxBodyBytes: number; idleTimeoutMs: number };
  now: () => number;
  /** kinference_provider_requests_total{provider,outcome}. */
  providerRequests: Pick<Counter<'provider' | 'outcome'>, 'inc'>;
  log(level: 'warn', message: string): void;
  /** Per-tenant overflow budgets (policy `overflow.budget`); absent: overflow is not counted. */
  budget?: OverflowBudget;
}

/** The agent's overflow from its settings: its limits, with the shared clock, metric, log and budget. */
export function overflowFor(settings: AgentSettings, deps: Omit<OverflowDeps, 'limits'>): Overflow {
  const { limits } = settings;
  return new Overflow({
    limits: { maxBodyBytes: limits.maxUpstreamBodyBytes, idleTimeoutMs: limits.providerIdleTimeoutMs },
    ...deps,
  });
}

/** The provider metric's outcome: an answered 4xx is the client's error, not an ok. */
export function attemptOutcome(a: Attempt): string {
  if (a.outcome !== 'answered') return a.outcome;
  return a.status && a.status >= 400 ? 'client_error' : 'ok';
}

export function describeAttempts(attempts: readonly Attempt[]): string {
  return attempts
    .map(
      (a) =>
        `${a.provider}: ${a.outcome}${a.reason ? ` (${a.reason}${a.status ? ` ${a.status}` : ''})` : ''}${a.message ? `: ${a.message}` : ''}`,
    )
    .join(', ');
}

/** Reached and answered badly (5xx, garbage) is a bad gateway; reached none is unavailability. */
export function failureStatus(attempts: readonly Attempt[]): 502 | 503 {
  return attempts.some((a) => a.outcome === 'failed' && (a.reason === 'status' || a.reason === 'protocol')) ? 502 : 503;
}

export class Overflow {
  readonly breakers = new BreakerSet();
  readonly #deps: OverflowDeps;
  #settings: readonly ProviderSettings[] | undefined;
  #providers = new Map<string, ClosableProvider>();

  constructor(deps: OverflowDeps) {
    this.#deps = deps;
  }

  /** New settings (a new array from discovery) rebuild every provider; the old ones close. */
  setProviders(settings: readonly ProviderSettings[]): void {
    if (settings === this.#settings) return;
    this.#settings = settings;
    const old = this.#providers;
    this.#providers = new Map(settings.map((p) => [p.name, createProvider(p, { limits: this.#deps.limits })]));
    for (const p of old.values()) void p.close().catch(() => {});
  }

  models(): string[] {
    return [...this.#providers.values()].flatMap((p) => p.models);
  }

  serves(model: string): boolean {
    return [...this.#providers.values()].some((p) => p.models.includes(model));
  }

  /** The policy's verdict, narrowed to the providers that can take this request now. */
  leaveVerdict(policy: EffectivePolicy, request: RouteRequest): LeaveVerdict {
    const verdict = mayLeave(policy, request);
    if (!verdict.allowed) return { ...verdict, providers: [] };
    const at = this.#deps.now();
    const named = policy.overflow.providers;
    const serving = named.filter((name) => this.#providers.get(name)?.supports(request.kind, request.model));
    if (serving.length === 0) {
      // Say why when the policy's providers can never take this kind of request (Bedrock and
      // /v1/responses), rather than "may overflow" on a request that then gets 429.
      const refusals = named
        .map((name) => this.#providers.get(name)?.refusal?.(request.kind))
        .filter((r): r is string => r !== undefined);
      if (refusals.length > 0 && refusals.length === named.length)
        return { allowed: false, reason: refusals.join('; '), providers: [] };
      return { ...verdict, providers: [] };
    }
    const usable = serving.filter((name) => this.breakers.get(name).state(at) !== 'open');
    if (usable.length > 0) return this.#withinBudget(policy, request, { ...verdict, providers: usable });
    const breakersOpenMs = Math.min(...serving.map((name) => this.breakers.get(name).retryInMs(at)));
    return {
      ...verdict,
      reason: `${verdict.reason}, but every provider's circuit breaker is open`,
      providers: [],
      breakersOpenMs,
    };
  }

  /** The providers the tenant's budget admits now; none: the request may not leave (the budget says why). */
  #withinBudget(policy: EffectivePolicy, request: RouteRequest, verdict: LeaveVerdict): LeaveVerdict {
    const { budget } = this.#deps;
    const limits = policy.budget ?? [];
    if (!budget || limits.length === 0) return verdict;
    const refusals = verdict.providers.map((name) => budget.refusal(request, name, limits));
    const admitted = verdict.providers.filter((_, i) => refusals[i] === undefined);
    if (admitted.length > 0) return { ...verdict, providers: admitted };
    // Every provider refused: the soonest any refills is when asking again can succeed.
    const first = refusals.filter((r) => r !== undefined).reduce((a, b) => (b.retryAfterMs < a.retryAfterMs ? b : a));
    return {
      allowed: false,
      reason: first.message,
      providers: [],
      budget: { scope: first.scope, reason: first.reason, retryAfterMs: first.retryAfterMs, message: first.message },
    };
  }

  /** Tries the named providers in order: the first answer, or why none answered. Budgeted
   *  overflow reserves before each provider is asked and settles from the answer's usage. */
  async send(
    request: RouteRequest,
    parsed: ParsedRequest,
    names: readonly string[],
    signal: AbortSignal,
    headers: Record<string, string>,
    policy?: EffectivePolicy,
  ): Promise<OverflowResult> {
    const { now, providerRequests, log, budget } = this.#deps;
    const limits = policy?.budget ?? [];
    const reserve =
      budget && limits.length > 0
        ? (provider: string) => {
            const reservation = budget.reserve(request, provider, limits);
            return reservation && { reservation, release: () => budget.ledger.release(reservation) };
          }
        : undefined;
    const chain = names.map((n) => this.#providers.get(n)).filter((p): p is ClosableProvider => p !== undefined);
    const result = await tryProviders(
      chain,
      // Only the allow-listed headers leave, and the request path classified their values.
      { kind: request.kind, model: request.model, body: parsed.body, signal, headers: offClusterHeaders(headers) },
      {
        breakers: this.breakers,
        now,
        onAttempt: (a) => providerRequests.inc({ provider: a.provider, outcome: attemptOutcome(a) }),
        reserve,
      },
    );
    if (result.ok) {
      const response = withHeaders(result.response, { 'x-kinference-route': `overflow/${result.provider}` });
      const held = result.hold?.reservation;
      return { ok: true, response: budget && held ? budget.settleOnBody(response, held) : response };
    }
    const summary = describeAttempts(result.attempts);
    log('warn', `overflow failed: ${summary}`);
    return {
      ok: false,
      status: failureStatus(result.attempts),
      message: `every overflow provider failed (${summary})`,
    };
  }

  /** The tenant's overflow budget as this agent sees the cluster now, per limit (explain, metrics); undefined: no budget. */
  budgetState(tenant: string, policy: EffectivePolicy) {
    const limits = policy.budget ?? [];
    if (!this.#deps.budget || limits.length === 0) return undefined;
    return this.#deps.budget.ledger.state(tenant, limits).map((s) => ({
      scope: s.scope,
      limit: { ...s.limit },
      usedTokens: s.usedTokens,
      usedRequests: s.usedRequests,
      ...(s.remainingTokens !== undefined ? { remainingTokens: s.remainingTokens } : {}),
      ...(s.remainingRequests !== undefined ? { remainingRequests: s.remainingRequests } : {}),
      resetsAt: new Date(s.resetsAt).toISOString(),
    }));
  }

  /** For /debug/state: the budget ledger (origin, synced, counters held); undefined without budgets. */
  budgetLedger() {
    return this.#deps.budget?.ledgerState();
  }

  /** For /debug/state: each provider with its breaker. */
  state(): {
    name: string;
    kind: string;
    models: readonly string[];
    breaker: ReturnType<ReturnType<BreakerSet['get']>['snapshot']>;
  }[] {
    const at = this.#deps.now();
    return [...this.#providers.values()].map((p) => ({
      name: p.name,
      kind: p.kind,
      models: p.models,
      breaker: this.breakers.get(p.name).snapshot(at),
    }));
  }

  async close(): Promise<void> {
    await Promise.all([...this.#providers.values()].map((p) => p.close().catch(() => {})));
  }
}
