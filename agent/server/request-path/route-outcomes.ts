// How one request's decision loop ends when no pod answers it: sent to the providers its policy
// allows (overflowAnswer), or refused with why and when to come back (refusal). inference.ts
// runs the loop; these are its last steps.
import type { Decision, LeaveVerdict } from '../../route/router.ts';
import type { EffectivePolicy, RouteRequest } from '../../types.ts';
import { answerOfResponse, errorAnswer, retryAfterSeconds, type Answer } from './answers.ts';
import type { ClientRequest } from './client-request.ts';
import { overflowReason } from '../observability/evidence.ts';
import type { BoundedLabel } from '../observability/metrics.ts';
import type { RequestContext, RequestPathDeps } from './path-deps.ts';
import type { ParsedRequest } from '../bodies/request.ts';
import type { RequestTrace } from '../observability/request-trace.ts';

/** One request on its way through the decision loop: what every step of it reads. */
export interface Routing {
  req: ClientRequest;
  ctx: RequestContext;
  /** The client's bytes, sent to pods as they came. */
  body: Uint8Array;
  parsed: ParsedRequest;
  request: RouteRequest;
  policy: EffectivePolicy;
  /** When the request arrived at the decision (its TTFT SLO counts from here). */
  started: number;
  spans: RequestTrace;
  /** Its session key (session affinity), if it has one. */
  session: string | undefined;
}

/** The providers' answer, or why none came; `podAttempts`: pods that failed before (the overflow's reason). */
export async function overflowAnswer(
  deps: RequestPathDeps,
  routing: Routing,
  decision: Extract<Decision, { action: 'overflow' }>,
  podAttempts: number,
): Promise<Answer> {
  const { req, ctx, parsed, request, policy, started, spans } = routing;
  const record = ctx.record;
  const reason = overflowReason(decision.dropped, podAttempts);
  record.overflowReason = reason;
  delete record.predictedTtftMs;
  const sent = deps.now();
  const span = spans.overflow(decision.providers);
  let result: Awaited<ReturnType<RequestPathDeps['overflow']>>;
  try {
    result = await deps.overflow(
      request,
      parsed,
      decision.providers,
      req.signal,
      { ...ctx.upstreamHeaders, ...span.headers },
      policy,
    );
  } catch (error) {
    span.end({ ok: false, error: (error as Error).message });
    throw error;
  }
  span.end(
    result.ok
      ? {
          ok: true,
          status: result.response.status,
          attributes: {
            'kinference.provider': result.response.headers.get('x-kinference-route')?.slice(9) ?? 'unknown',
          },
        }
      : { ok: false, status: result.status, error: result.message },
  );
  if (result.ok) {
    // Time to the provider's answer as the client sees it: headers for a stream (the chain
    // reads a Bedrock stream's first event first), the whole JSON otherwise.
    const ttftMs = deps.now() - sent;
    record.ttftMs = Math.round(ttftMs * 10) / 10;
    const answer = answerOfResponse(result.response);
    const provider = answer.headers['x-kinference-route']?.slice('overflow/'.length) ?? 'unknown';
    deps.metrics.overflows.inc({ provider, reason });
    deps.metrics.upstreamTtft.observe(ttftMs / 1000, 'overflow', String(parsed.stream));
    // The provider's answer is in hand at its first byte when streamed: close enough to its TTFT.
    if (parsed.stream)
      deps.metrics.sloRequests.add(1, 'overflow', 'true', String(deps.now() - started <= policy.sloTtftMs));
    return answer;
  }
  return errorAnswer(result.status, `no pod can answer in time and ${result.message}`, {
    code: result.status === 503 ? 'providers_unavailable' : 'providers_failed',
    headers: { 'retry-after': retryAfterSeconds(policy) },
  });
}

/** The refusal of a request no pod took in time and that may not (or could not) leave. */
export function refusal(
  deps: RequestPathDeps,
  routing: Routing,
  decision: Extract<Decision, { action: 'reject' }>,
  leave: LeaveVerdict,
  tenantLabel: BoundedLabel,
): Answer {
  const { request, policy } = routing;
  if (decision.status === 429 || decision.retryAfterMs !== undefined) deps.metrics.waits.inc({ outcome: 'timeout' });
  if (leave.budget && decision.status === 429) {
    // Waited for a pod because the tenant's overflow budget kept it here: say when it refills.
    deps.metrics.budgetRefusals.inc({
      tenant: tenantLabel.value(request.tenant),
      reason: leave.budget.reason,
    });
    return errorAnswer(429, `${decision.message}; ${leave.budget.message}`, {
      code: 'overflow_budget_exhausted',
      headers: {
        'retry-after': String(Math.max(1, Math.ceil(leave.budget.retryAfterMs / 1000))),
        'x-kinference-budget': leave.budget.scope,
        'x-kinference-policy': policy.name,
      },
    });
  }
  const retryAfter =
    decision.retryAfterMs !== undefined
      ? String(Math.max(1, Math.ceil(decision.retryAfterMs / 1000)))
      : retryAfterSeconds(policy);
  return errorAnswer(decision.status, decision.message, {
    code:
      decision.retryAfterMs !== undefined
        ? 'providers_unavailable'
        : decision.status === 429
          ? 'no_capacity_in_time'
          : 'no_capacity',
    headers: { 'retry-after': retryAfter, 'x-kinference-policy': policy.name },
  });
}
