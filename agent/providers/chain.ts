// The overflow chain: try the policy's providers in order until one answers. A provider that
// fails before the first byte (no connection, no headers in time, throttled, broken, or our own
// account rejected) is recorded, counts against its breaker, and the next is tried. A provider
// that says it cannot take *this request* (400, 413, 422: Bedrock and `n > 1`, a context window
// too small) declines: the next provider may well take it, and the provider's breaker is not
// touched (the client's request is not the provider's fault). When every provider declined,
// the last refusal goes back to the client. An error thrown by our own code while sending is
// the request's too: it never counts against a breaker.
import type { Provider, ProviderCall } from './types.ts';
import type { BreakerSet } from './breaker.ts';
import { isProviderFault, ProviderError, type FailureReason } from './upstream.ts';

export { isProviderFault };

export interface Attempt {
  provider: string;
  outcome: 'answered' | 'declined' | 'failed' | 'skipped';
  /** Why it was skipped, declined or failed. */
  reason?: 'unsupported' | 'breaker-open' | 'budget' | 'status' | FailureReason | 'error';
  /** HTTP status of the provider's answer, when there was one. */
  status?: number;
  /** Safe to show: never holds credentials. */
  message?: string;
  /** Time spent on this provider, per the injected clock. */
  ms?: number;
}

/** Overflow budget held for one attempt: given back when that provider does not answer. */
export interface BudgetHold {
  release(): void;
}

export interface ChainOptions<H extends BudgetHold = BudgetHold> {
  breakers: Pick<BreakerSet, 'get'>;
  now: () => number;
  onAttempt?: (attempt: Attempt) => void;
  /** Holds the request's budget for this provider before it is asked; undefined: the budget refuses it (skipped). */
  reserve?: (provider: string) => H | undefined;
}

export type ChainResult<H extends BudgetHold = BudgetHold> =
  | { ok: true; provider: string; response: Response; attempts: Attempt[]; hold?: H }
  | { ok: false; attempts: Attempt[] };

export async function tryProviders<H extends BudgetHold = BudgetHold>(
  providers: readonly Provider[],
  call: ProviderCall,
  opts: ChainOptions<H>,
): Promise<ChainResult<H>> {
  const attempts: Attempt[] = [];
  /** The latest "can't take this request" answer: the reply when nobody takes it. */
  let declined: { provider: string; response: Response } | undefined;
  const record = (a: Attempt) => {
    attempts.push(a);
    opts.onAttempt?.(a);
  };

  for (const provider of providers) {
    if (call.signal.aborted) break;
    if (!provider.supports(call.kind, call.model)) {
      record({ provider: provider.name, outcome: 'skipped', reason: 'unsupported' });
      continue;
    }
    const breaker = opts.breakers.get(provider.name);
    const started = opts.now();
    const hold = opts.reserve?.(provider.name);
    if (opts.reserve && !hold) {
      record({ provider: provider.name, outcome: 'skipped', reason: 'budget' });
      continue;
    }
    if (!breaker.allow(started)) {
      hold?.release();
      record({ provider: provider.name, outcome: 'skipped', reason: 'breaker-open' });
      continue;
    }

    let response: Response;
    try {
      response = await provider.send(call);
    } catch (err) {
      hold?.release();
      const reason: Attempt['reason'] = err instanceof ProviderError ? err.reason : 'error';
      const message = err instanceof ProviderError ? err.message : `provider ${provider.name}: request failed`;
      if (call.signal.aborted) {
        // The client left: that says nothing about the provider's health.
        breaker.release();
        record({ provider: provider.name, outcome: 'failed', reason: 'aborted', message, ms: opts.now() - started });
        break;
      }
      if (!(err instanceof ProviderError)) {
        // Thrown by our side (building or serialising this request): the provider was never asked.
        breaker.release();
        record({ provider: provider.name, outcome: 'failed', reason, message, ms: opts.now() - started });
        continue;
      }
      breaker.onFailure(opts.now());
      record({ provider: provider.name, outcome: 'failed', reason, message, ms: opts.now() - started });
      continue;
    }

    if (isProviderFault(response.status)) {
      hold?.release();
      breaker.onFailure(opts.now());
      record({
        provider: provider.name,
        outcome: 'failed',
        reason: 'status',
        status: response.status,
        message: await errorMessage(response),
        ms: opts.now() - started,
      });
      continue;
    }
    breaker.onSuccess(); // it answered: healthy, whatever it thought of the request
    if (declinesRequest(response.status)) {
      hold?.release(); // it did no work: the next provider (or none) holds the budget
      await declined?.response.body?.cancel().catch(() => {});
      declined = { provider: provider.name, response };
      record({ provider: provider.name, outcome: 'declined', status: response.status, ms: opts.now() - started });
      continue;
    }
    await declined?.response.body?.cancel().catch(() => {});
    record({ provider: provider.name, outcome: 'answered', status: response.status, ms: opts.now() - started });
    return { ok: true, provider: provider.name, response, attempts, ...(hold ? { hold } : {}) };
  }
  if (declined !== undefined && !call.signal.aborted) return { ok: true, ...declined, attempts };
  await declined?.response.body?.cancel().catch(() => {});
  return { ok: false, attempts };
}

/** "This provider cannot take this request": another provider might. */
export function declinesRequest(status: number): boolean {
  return status === 400 || status === 413 || status === 422;
}

/** The message of a discarded OpenAI error answer (bodies are small; reading frees the socket). */
async function errorMessage(response: Response): Promise<string | undefined> {
  try {
    const body = (await response.json()) as { error?: { message?: unknown } };
    return typeof body.error?.message === 'string' ? body.error.message : undefined;
  } catch {
    return undefined;
  }
}
