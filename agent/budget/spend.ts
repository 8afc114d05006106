// The overflow budget on the request path: the estimate a request reserves before a provider is
// asked (prompt estimate + the most the answer may take), and settling it from the usage the
// provider reports in its answer, once the answer's body has gone through. The ledger decides.
import { usageOf } from '../../shared/openai/usage.ts';
import type { RouteRequest } from '../types.ts';
import type { BudgetLedger, Reservation } from './ledger.ts';
import type { BudgetLimit } from './limits.ts';

/** The tail of a streamed answer kept to find its usage chunk (the last data events). */
const STREAM_TAIL_BYTES = 16 * 1024;

export interface OverflowBudgetOptions {
  ledger: BudgetLedger;
  /** Completion tokens assumed when the client set no max_tokens (the overshoot note says why it matters). */
  completionEstimate: number;
  /** Most bytes of a non-streamed answer read for its usage; a larger answer settles at the estimate. */
  maxUsageBodyBytes: number;
  /** Most tenants whose budget the metrics show (the label bound); later tenants are enforced, not shown. */
  maxShownTenants: number;
}

export class OverflowBudget {
  readonly ledger: BudgetLedger;
  readonly #o: OverflowBudgetOptions;
  /** Tenants that overflowed under a budget, with its limits: what the usage gauges show. */
  readonly #shown = new Map<string, readonly BudgetLimit[]>();

  constructor(options: OverflowBudgetOptions) {
    this.#o = options;
    this.ledger = options.ledger;
  }

  /** Tokens one request reserves: what it sends plus the most it may get back (embeddings: none). */
  estimate(request: RouteRequest): number {
    if (request.kind === 'embeddings') return request.promptTokens;
    return request.promptTokens + (request.maxTokens ?? this.#o.completionEstimate);
  }

  /** Why the budget keeps this request from `provider` now (undefined: it may go). */
  refusal(request: RouteRequest, provider: string, limits: readonly BudgetLimit[]) {
    return this.ledger.check(request.tenant, provider, this.estimate(request), limits);
  }

  reserve(request: RouteRequest, provider: string, limits: readonly BudgetLimit[]): Reservation | undefined {
    const admission = this.ledger.reserve(request.tenant, provider, this.estimate(request), limits);
    if (this.#shown.has(request.tenant) || this.#shown.size < this.#o.maxShownTenants)
      this.#shown.set(request.tenant, limits);
    return admission.ok ? admission.reservation : undefined;
  }

  /** The ledger's own state (/debug/state, metrics): its origin, whether it heard the cluster, what it holds. */
  ledgerState(): { origin: string; synced: boolean; origins: number; counters: number; dropped: number } {
    const { ledger } = this;
    return { origin: ledger.origin, synced: ledger.synced, ...ledger.size, dropped: ledger.dropped };
  }

  /** Usage and what remains per shown tenant and limit, as this agent sees the cluster now (metrics). */
  usage(): { tenant: string; states: ReturnType<BudgetLedger['state']> }[] {
    return [...this.#shown].map(([tenant, limits]) => ({ tenant, states: this.ledger.state(tenant, limits) }));
  }

  /**
   * The answer, passed through untouched, settling the reservation when its body ends: with the
   * usage the provider reported, else (no usage, broken, client gone) with the estimate, which
   * is the most the request could have cost.
   */
  settleOnBody(response: Response, reservation: Reservation): Response {
    const { ledger } = this;
    const settle = (used: number | undefined) => ledger.settle(reservation, used ?? reservation.tokens);
    if (!response.body) {
      settle(undefined);
      return response;
    }
    const streamed = response.headers.get('content-type')?.includes('event-stream') ?? false;
    const limit = streamed ? STREAM_TAIL_BYTES : this.#o.maxUsageBodyBytes;
    let kept: Uint8Array[] = [];
    let keptBytes = 0;
    let overflowed = false;
    const reader = response.body.getReader();
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await reader.read();
        } catch (error) {
          settle(undefined);
          controller.error(error);
          return;
        }
        if (chunk.done) {
          settle(overflowed && !streamed ? undefined : usedTokens(Buffer.concat(kept), streamed));
          controller.close();
          return;
        }
        kept.push(chunk.value);
        keptBytes += chunk.value.byteLength;
        while (keptBytes > limit && kept.length > 1) {
          keptBytes -= kept[0].byteLength;
          kept = kept.slice(1);
          overflowed = true;
        }
        controller.enqueue(chunk.value);
      },
      cancel(reason) {
        settle(undefined);
        return reader.cancel(reason);
      },
    });
    return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  }
}

/** Prompt + completion tokens the answer reports: its JSON `usage`, or a stream's last usage event. */
export function usedTokens(bytes: Uint8Array, streamed: boolean): number | undefined {
  if (!streamed) return total(usageOf(bytes));
  const lines = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8').split('\n');
  // The last event with usage; an Anthropic stream's last (message_delta) may count only output
  // tokens, its input ones then come from message_start, further back.
  let completion: number | undefined;
  for (let i = lines.length - 1; i >= 0; i--) {
    const line = lines[i].trim();
    if (!line.startsWith('data:') || !line.includes('"usage"')) continue;
    const u = usageOf(Buffer.from(line.slice(5).trim()));
    if (u.promptTokens !== undefined) return u.promptTokens + (completion ?? u.completionTokens ?? 0);
    completion ??= u.completionTokens;
  }
  return completion;
}

function total(u: { promptTokens?: number; completionTokens?: number }): number | undefined {
  if (u.promptTokens === undefined && u.completionTokens === undefined) return undefined;
  return (u.promptTokens ?? 0) + (u.completionTokens ?? 0);
}
