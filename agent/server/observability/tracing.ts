// OpenTelemetry spans for one request: the request itself, each routing decision with its
// candidates' predictions, the wait for a pod, each pod attempt and the overflow. Spans are
// children of the caller's W3C traceparent, and pods and providers get the attempt's own context,
// so their spans nest under it. Loaded only when a tracer is configured (agent.ts); otherwise the
// request path uses request-trace.ts's no-op trace and never loads OpenTelemetry.
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { Attributes, Context, Span, Tracer } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import type { Decision } from '../../route/router.ts';
import type { ChildSpan, RequestTrace, RequestTraces } from './request-trace.ts';
import { candidateName } from '../../route/router.ts';
import type { Candidate } from '../../route/candidate.ts';

const propagator = new W3CTraceContextPropagator();
const headerGetter = {
  get: (carrier: { get(name: string): string | null | undefined }, key: string) => carrier.get(key) ?? undefined,
  keys: () => [],
};
const headerSetter = {
  set: (carrier: Record<string, string>, key: string, value: string) => {
    carrier[key] = value;
  },
};

/** Most candidates listed on a decision span (the fastest first); the rest are only counted. */
const MAX_CANDIDATES_ON_SPAN = 16;

class SpanChild implements ChildSpan {
  readonly headers: Record<string, string> = {};
  readonly #span: Span;
  constructor(span: Span, parent: Context) {
    this.#span = span;
    propagator.inject(trace.setSpan(parent, span), this.headers, headerSetter);
  }
  end(outcome: { ok: boolean; status?: number; attributes?: Attributes; error?: string }): void {
    if (outcome.status !== undefined) this.#span.setAttribute('http.response.status_code', outcome.status);
    if (outcome.attributes) this.#span.setAttributes(outcome.attributes);
    if (!outcome.ok) this.#span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.error });
    this.#span.end();
  }
}

class LiveTrace implements RequestTrace {
  readonly #tracer: Tracer;
  readonly #span: Span;
  readonly #ctx: Context;
  #decisions = 0;

  constructor(tracer: Tracer, parent: Context, api: string, model: string) {
    this.#tracer = tracer;
    this.#span = tracer.startSpan(
      `kinference ${api}`,
      { kind: SpanKind.SERVER, attributes: { 'kinference.api': api, 'gen_ai.request.model': model } },
      parent,
    );
    this.#ctx = trace.setSpan(parent, this.#span);
  }

  decided(decision: Decision): void {
    this.#decisions++;
    const attributes: Attributes = {
      'kinference.decision.action': decision.action,
      'kinference.decision.policy': decision.policy,
      'kinference.decision.index': this.#decisions,
      'kinference.candidates.scored': decision.scored.length,
      'kinference.candidates.dropped': decision.dropped.length,
    };
    const shown = decision.scored.slice(0, MAX_CANDIDATES_ON_SPAN);
    attributes['kinference.candidates.pods'] = shown.map((s) => candidateName(s.candidate));
    attributes['kinference.candidates.predicted_ttft_ms'] = shown.map((s) => round(s.predictedMs));
    const dropped = decision.dropped.slice(0, MAX_CANDIDATES_ON_SPAN);
    attributes['kinference.dropped.pods'] = dropped.map((d) => d.pod);
    attributes['kinference.dropped.reasons'] = dropped.map((d) => d.reason);
    if (decision.action === 'pod') {
      attributes['kinference.decision.pod'] = candidateName(decision.chosen.candidate);
      attributes['kinference.decision.predicted_ttft_ms'] = round(decision.predictedTtftMs);
    } else if (decision.action === 'overflow') attributes['kinference.decision.providers'] = [...decision.providers];
    else if (decision.action === 'wait') attributes['kinference.decision.max_wait_ms'] = decision.maxWaitMs;
    else attributes['kinference.decision.status'] = decision.status;
    this.#tracer.startSpan('kinference.decide', { attributes }, this.#ctx).end();
  }

  waiting(maxMs: number): (outcome: string) => void {
    const span = this.#tracer.startSpan(
      'kinference.wait',
      { attributes: { 'kinference.wait.max_ms': maxMs } },
      this.#ctx,
    );
    return (outcome) => {
      span.setAttribute('kinference.wait.outcome', outcome);
      span.end();
    };
  }

  attempt(candidate: Candidate, predictedMs: number): ChildSpan {
    const span = this.#tracer.startSpan(
      'kinference.attempt',
      {
        kind: SpanKind.CLIENT,
        attributes: {
          'kinference.pod': candidateName(candidate),
          'kinference.pod.namespace': candidate.pod.namespace,
          'kinference.pod.where': candidate.where,
          'server.address': candidate.pod.address,
          'kinference.predicted_ttft_ms': round(predictedMs),
        },
      },
      this.#ctx,
    );
    return new SpanChild(span, this.#ctx);
  }

  overflow(providers: readonly string[]): ChildSpan {
    const span = this.#tracer.startSpan(
      'kinference.overflow',
      { kind: SpanKind.CLIENT, attributes: { 'kinference.overflow.providers': [...providers] } },
      this.#ctx,
    );
    return new SpanChild(span, this.#ctx);
  }

  end(status: number, route: string | undefined, error?: string): void {
    this.#span.setAttribute('http.response.status_code', status);
    if (route) this.#span.setAttribute('kinference.route', route);
    if (status >= 500 || error) this.#span.setStatus({ code: SpanStatusCode.ERROR, message: error });
    this.#span.end();
  }
}

const round = (ms: number) => Math.round(ms * 10) / 10;

/**
 * The traces of requests through `tracer`: each a child of the caller's `traceparent` (and
 * `tracestate`) when valid, else a new trace.
 */
export function requestTraces(tracer: Tracer): RequestTraces {
  return (headers, api, model) =>
    new LiveTrace(tracer, propagator.extract(ROOT_CONTEXT, headers, headerGetter), api, model);
}
