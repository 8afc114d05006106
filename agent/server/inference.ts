// The life of one inference request: validate, identify, classify, resolve policy, then decide
// and act until answered — forward to a pod (retrying another before the first byte), overflow
// to providers, wait for a pod, or reject. Every answer says where it went.
import { errorResponse, responsesErrorEvent } from '../../shared/openai/errors.ts';
import { describeUnexpected } from '../../shared/describe-error.ts';
import { endOnSignal, relayStream, readRest } from '../forward/relay.ts';
import { sendToPod, type PodTimeouts } from '../forward/pod.ts';
import type { Agent as Dispatcher } from 'undici';
import type { Readable } from 'node:stream';
import { estimatePromptTokens } from '../predict/tokens.ts';
import { BLOCK_TOKENS, CHARS_PER_TOKEN, promptBlocks, renderPrompt } from '../prefix/blocks.ts';
import { candidateName, decide, type Decision, type LeaveVerdict } from '../route/router.ts';
import type { Candidate } from '../route/candidate.ts';
import type { Scored } from '../route/picker.ts';
import { API_PATHS, type EffectivePolicy, type RequestKind, type RouteRequest } from '../types.ts';
import { BoundedLabel, type Metrics } from './metrics.ts';
import { parseInferenceRequest, readBoundedBody, RequestError, type ParsedRequest } from './request.ts';
import type { Identity } from './identify.ts';
import { logLine, onBodyEnd, overflowReason, usageOf, type RequestRecord } from './evidence.ts';
import { propagatedHeaders, requestIdFor } from '../forward/headers.ts';
import type { Limits } from '../config/load.ts';
import { WaitingRoom } from '../admission/waiting.ts';
import { DEFAULT_PRIORITY, PRIORITY_HEADER, priorityOf, type Priority } from '../budget/limits.ts';

/** One request's context along the path: its id, what goes upstream with it, and its record. */
export interface RequestContext {
  record: RequestRecord;
  /** x-request-id and the client's trace context, for pods and providers. */
  upstreamHeaders: Record<string, string>;
  started: number;
  /** How the last pod tried failed before its first byte (safe to show: codes, statuses). */
  lastPodError?: string;
}

export type OverflowResult =
  | { ok: true; response: Response }
  /** 503: no provider could be reached (refused, timed out, circuit open); 502: they answered badly. */
  | { ok: false; status: 502 | 503; message: string };

/** What the request path needs from the rest of the agent. */
export interface RequestPathDeps {
  metrics: Metrics;
  dispatcher: Dispatcher;
  limits: {
    maxBodyBytes: number;
    maxRetries: number;
    maxWaiting: number;
    maxLabelValues: number;
    maxJsonDepth: number;
    /** Prompt blocks hashed per request for the prefix index. */
    prefixMaxBlocks: number;
    maxUpstreamBodyBytes: number;
  } & { pod: PodTimeouts };
  now: () => number;
  rand: () => number;
  /** Errors of our own on the request path (the agent's logger). */
  log(level: 'error', message: string): void;
  /** A fresh request id when the client sent none. */
  newRequestId: () => string;
  /** Share of requests (0..1) that write a JSON log line, and where the lines go. */
  requestLog: { sample: number; write(line: string): void };
  /** Headers that authenticate the agent to this pod (its configured API key), if any. */
  podAuth(pod: Candidate['pod']): Record<string, string>;
  identify(req: Request, remoteIp: string | undefined): Identity;
  classify(headerTags: string | null, body: Record<string, unknown>): string[];
  isKnownModel(model: string): boolean;
  policyFor(identity: Identity, model: string): EffectivePolicy;
  leaveVerdict(policy: EffectivePolicy, request: RouteRequest): LeaveVerdict;
  pool: {
    /**
     * The candidates for a request for `model` (local pods serving it, its peer shortlist), with
     * each local pod's expected cached tokens of `promptBlocks`.
     */
    candidates(model: string, promptBlocks?: readonly number[]): Candidate[];
    /** Bookkeeping for one request sent to a pod; returns hooks for its first byte and end. */
    begin(
      c: Candidate,
      promptTokens: number,
      kind: RequestKind,
      stream: boolean,
      promptBlocks?: readonly number[],
    ): { firstByte(ms: number): void; answered(ms: number): void; end(ok: boolean): void };
    /** The pod failed before its first byte: keep it out of decisions for a moment. */
    markFailed(c: Candidate): void;
    /** Resolves at the next change of any candidate (scrape, gossip, a request ending). */
    nextChange(timeoutMs: number, signal: AbortSignal): Promise<'change' | 'timeout' | 'aborted'>;
  };
  /** Tries the providers in order: their answer, or why none answered. */
  overflow(
    request: RouteRequest,
    parsed: ParsedRequest,
    providers: readonly string[],
    signal: AbortSignal,
    headers: Record<string, string>,
    policy: EffectivePolicy,
  ): Promise<OverflowResult>;
}

/** The request path's limits, from the agent's settings. */
export function requestPathLimits(limits: Limits): RequestPathDeps['limits'] {
  return {
    maxBodyBytes: limits.maxBodyBytes,
    maxRetries: limits.maxRetries,
    maxWaiting: limits.maxWaiting,
    maxLabelValues: limits.maxLabelValues,
    maxJsonDepth: limits.maxJsonDepth,
    prefixMaxBlocks: limits.prefixMaxBlocks,
    maxUpstreamBodyBytes: limits.maxUpstreamBodyBytes,
    pod: {
      connectMs: limits.podConnectTimeoutMs,
      responseMs: limits.podResponseTimeoutMs,
      idleMs: limits.podIdleTimeoutMs,
    },
  };
}

export function withHeaders(response: Response, headers: Record<string, string>): Response {
  const merged = new Headers(response.headers);
  for (const [k, v] of Object.entries(headers)) merged.set(k, v);
  return new Response(response.body, { status: response.status, headers: merged });
}

/** 502 after every pod tried failed before its first byte; says how the last one failed. */
export function podsFailed(attempts: number, lastError?: string): Response {
  const last = lastError ? `; last: ${lastError}` : '';
  return errorResponse(
    502,
    `the model server failed before answering (tried ${attempts} pod${attempts > 1 ? 's' : ''}${last})`,
    { code: 'upstream_failed' },
  );
}

function retryAfterSeconds(policy: EffectivePolicy): string {
  return String(Math.max(1, Math.ceil(policy.waitMaxMs / 1000)));
}

export class RequestPath {
  readonly deps: RequestPathDeps;
  /** Requests waiting for a pod, woken in order (priority, fair across tenants, FCFS within one). */
  readonly waiting: WaitingRoom;
  readonly #modelLabel: BoundedLabel;
  readonly #policyLabel: BoundedLabel;
  readonly #tenantLabel: BoundedLabel;
  /** Fired at the drain deadline: streams still running end with an error event and [DONE]. */
  readonly #drainDeadline = new AbortController();

  constructor(deps: RequestPathDeps) {
    this.deps = deps;
    this.#modelLabel = new BoundedLabel(deps.limits.maxLabelValues);
    this.#policyLabel = new BoundedLabel(deps.limits.maxLabelValues);
    this.#tenantLabel = new BoundedLabel(deps.limits.maxLabelValues);
    this.waiting = new WaitingRoom({
      maxWaiting: deps.limits.maxWaiting,
      now: deps.now,
      nextChange: (ms, signal) => deps.pool.nextChange(ms, signal),
    });
  }

  /** The routing input for a parsed request (also used by /explain). */
  routeRequest(parsed: ParsedRequest, identity: Identity, tags: string[]): RouteRequest {
    return {
      kind: parsed.kind,
      model: parsed.model,
      tenant: identity.tenant,
      namespace: identity.namespace,
      tags,
      promptTokens: estimatePromptTokens(parsed.kind === 'responses' ? responsesPromptView(parsed.body) : parsed.body),
      stream: parsed.stream,
      ...maxTokensOf(parsed.body),
      // Embeddings are not prefix-cached by the engines; everything else is matched on its rendered prompt.
      ...(parsed.kind === 'embeddings'
        ? {}
        : {
            promptBlocks: promptBlocks(
              renderPrompt(parsed.body),
              BLOCK_TOKENS * CHARS_PER_TOKEN,
              this.deps.limits.prefixMaxBlocks,
            ),
          }),
    };
  }

  /** The drain deadline passed: end every stream still running, properly. */
  endStreams(): void {
    this.#drainDeadline.abort();
  }

  /** A decision now, with no side effect: what /explain shows. */
  explain(request: RouteRequest, identity: Identity): Decision {
    const policy = this.deps.policyFor(identity, request.model);
    return decide({
      request,
      policy,
      candidates: this.deps.pool.candidates(request.model, request.promptBlocks),
      leave: this.deps.leaveVerdict(policy, request),
      rand: this.deps.rand,
    });
  }

  /** Runs `serve` for one request with its id, metrics and (sampled) log line; both the
   *  inference routes and the passthrough routes go through here. */
  async serve(api: string, req: Request, serve: (ctx: RequestContext) => Promise<Response>): Promise<Response> {
    const { metrics } = this.deps;
    const started = this.deps.now();
    const requestId = requestIdFor(req.headers.get('x-request-id'), this.deps.newRequestId);
    const ctx: RequestContext = {
      started,
      upstreamHeaders: propagatedHeaders(req.headers, requestId),
      record: {
        time: new Date().toISOString(),
        requestId,
        api,
        tags: [],
        route: 'rejected',
        status: 0,
        outcome: 'error',
        stream: false,
        podAttempts: 0,
        waitedMs: 0,
      },
    };
    metrics.inFlight.inc();
    let response: Response;
    try {
      response = await serve(ctx);
    } catch (error) {
      if (error instanceof RequestError) {
        response = errorResponse(error.status, error.message, { param: error.param, code: error.code });
      } else if (req.signal.aborted) {
        response = errorResponse(499, 'client closed the request', { code: 'client_closed' });
      } else {
        this.deps.log('error', `unexpected error on the request path: ${describeUnexpected(error)}`);
        response = errorResponse(500, 'internal error in the agent', { type: 'server_error' });
      }
    } finally {
      metrics.inFlight.dec();
    }
    const r = ctx.record;
    r.route = response.headers.get('x-kinference-route') ?? 'rejected';
    r.status = response.status;
    // A client that left before its answer is its own outcome, not the status we could not send.
    r.outcome =
      req.signal.aborted || response.status === 499 ? 'cancelled' : response.ok ? 'ok' : String(response.status);
    metrics.requests.inc({
      api,
      route: r.route.split('/')[0],
      outcome: r.outcome,
      model: r.model === undefined ? 'none' : this.#modelLabel.value(r.model),
      policy: r.policy === undefined ? 'none' : this.#policyLabel.value(r.policy),
    });
    response.headers.set('x-request-id', requestId);
    // Content type first: reading `.body` of a whole (bytes) answer would turn @hono/node-server's
    // light Response into a web one, whose body is then copied and read back through a web stream.
    if (response.headers.get('content-type')?.includes('event-stream') && response.body) {
      const body = endOnSignal(
        response.body,
        this.#drainDeadline.signal,
        'the agent is shutting down and its drain deadline passed; the answer is incomplete',
      );
      response = new Response(body, { status: response.status, headers: response.headers });
    }
    const { requestLog } = this.deps;
    if (requestLog.sample <= 0 || this.deps.rand() >= requestLog.sample) return response;
    return onBodyEnd(response, (ok) => {
      if (!ok && r.outcome === 'ok') r.outcome = 'broken';
      r.durationMs = Math.round(this.deps.now() - started);
      requestLog.write(logLine(r));
    });
  }

  /** `incoming`: the request's node stream when served on node:http, read instead of `req.body`. */
  handle(kind: RequestKind, req: Request, remoteIp: string | undefined, incoming?: Readable): Promise<Response> {
    return this.serve(kind, req, (ctx) => this.#handle(kind, req, remoteIp, ctx, incoming));
  }

  async #handle(
    kind: RequestKind,
    req: Request,
    remoteIp: string | undefined,
    ctx: RequestContext,
    incoming: Readable | undefined,
  ): Promise<Response> {
    const deps = this.deps;
    const record = ctx.record;
    // Pods get the client's bytes as they came: no re-serialisation on the hot path.
    const body = await readBoundedBody(req, deps.limits.maxBodyBytes, incoming);
    const parsed = parseInferenceRequest(kind, body, deps.limits.maxJsonDepth);
    if (!deps.isKnownModel(parsed.model)) {
      throw new RequestError(404, `The model \`${parsed.model}\` does not exist.`, 'model', 'model_not_found');
    }
    const identity = deps.identify(req, remoteIp);
    const tags = deps.classify(req.headers.get('x-kinference-tags'), parsed.body);
    const request = this.routeRequest(parsed, identity, tags);
    const policy = deps.policyFor(identity, parsed.model);
    Object.assign(record, {
      model: parsed.model,
      tenant: identity.tenant,
      namespace: identity.namespace,
      policy: policy.name,
      tags,
      stream: parsed.stream,
      promptTokensEstimate: request.promptTokens,
    });
    const started = deps.now();
    const tried = new Set<string>();
    let podAttempts = 0;
    let waited = false;
    const priority = priorityOf(policy.priority ?? DEFAULT_PRIORITY, req.headers.get(PRIORITY_HEADER) ?? undefined);
    /** Whether a change in the pool lets this request act now: a pod for it, or it may leave. */
    const canAct = () => {
      const leave = deps.leaveVerdict(policy, request);
      const candidates = deps.pool.candidates(request.model, request.promptBlocks).filter((c) => !tried.has(c.pod.uid));
      const d = decide({ request, policy, candidates, leave, waitedMs: deps.now() - started, rand: deps.rand });
      return d.action === 'pod' || d.action === 'overflow';
    };

    for (;;) {
      const leave = deps.leaveVerdict(policy, request);
      const candidates = deps.pool.candidates(request.model, request.promptBlocks).filter((c) => !tried.has(c.pod.uid));
      const decision = decide({ request, policy, candidates, leave, waitedMs: deps.now() - started, rand: deps.rand });
      for (const d of decision.dropped) deps.metrics.dropped.inc({ reason: d.reason });

      if (decision.action === 'pod') {
        if (waited) {
          deps.metrics.waits.inc({ outcome: 'pod' });
          waited = false;
        }
        const chosen = decision.chosen.candidate;
        podAttempts++;
        record.podAttempts = podAttempts;
        record.predictedTtftMs = Math.round(decision.predictedTtftMs * 10) / 10;
        const slo = { leavable: leave.allowed, started, sloTtftMs: policy.sloTtftMs };
        const answer = await this.#sendToPod(chosen, parsed, body, request, decision.chosen, slo, req.signal, ctx);
        if (answer) return answer;
        tried.add(chosen.pod.uid);
        if (req.signal.aborted) throw new Error('client gone');
        if (podAttempts > deps.limits.maxRetries) return podsFailed(podAttempts, ctx.lastPodError);
        deps.metrics.retries.inc();
        continue;
      }

      // Every pod we could try failed before answering: overflow if allowed, else say so (502);
      // waiting for a pod that just failed would only delay the same answer.
      if (podAttempts > 0 && (decision.action === 'wait' || decision.action === 'reject'))
        return podsFailed(podAttempts, ctx.lastPodError);

      if (decision.action === 'overflow') {
        const reason = overflowReason(decision.dropped, podAttempts);
        record.overflowReason = reason;
        delete record.predictedTtftMs;
        const sent = deps.now();
        const result = await deps.overflow(
          request,
          parsed,
          decision.providers,
          req.signal,
          ctx.upstreamHeaders,
          policy,
        );
        if (result.ok) {
          // Time to the provider's answer as the client sees it: headers for a stream (the chain
          // reads a Bedrock stream's first event first), the whole JSON otherwise.
          const ttftMs = deps.now() - sent;
          record.ttftMs = Math.round(ttftMs * 10) / 10;
          const provider = result.response.headers.get('x-kinference-route')?.slice('overflow/'.length) ?? 'unknown';
          deps.metrics.overflows.inc({ provider, reason });
          deps.metrics.upstreamTtft.observe({ route: 'overflow', stream: String(parsed.stream) }, ttftMs / 1000);
          // The provider's answer is in hand at its first byte when streamed: close enough to its TTFT.
          if (parsed.stream)
            deps.metrics.sloRequests.inc({
              route: 'overflow',
              leavable: 'true',
              within_slo: String(deps.now() - started <= policy.sloTtftMs),
            });
          return result.response;
        }
        return errorResponse(result.status, `no pod can answer in time and ${result.message}`, {
          code: result.status === 503 ? 'providers_unavailable' : 'providers_failed',
          headers: { 'retry-after': retryAfterSeconds(policy) },
        });
      }

      if (decision.action === 'wait') {
        const woke = await this.waitInLine(
          { tenant: request.tenant, priority, maxMs: decision.maxWaitMs },
          canAct,
          req.signal,
          record,
        );
        if (woke === 'full' || woke === 'shed') {
          const message =
            woke === 'full'
              ? 'too many requests are already waiting for a pod'
              : 'too many requests are waiting for a pod and this one has a lower priority than those that arrived';
          return errorResponse(429, message, {
            code: 'wait_queue_full',
            headers: { 'retry-after': retryAfterSeconds(policy) },
          });
        }
        waited = true;
        continue;
      }

      if (decision.status === 429 || decision.retryAfterMs !== undefined)
        deps.metrics.waits.inc({ outcome: 'timeout' });
      if (leave.budget && decision.status === 429) {
        // Waited for a pod because the tenant's overflow budget kept it here: say when it refills.
        deps.metrics.budgetRefusals.inc({
          tenant: this.#tenantLabel.value(request.tenant),
          reason: leave.budget.reason,
        });
        return errorResponse(429, `${decision.message}; ${leave.budget.message}`, {
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
      return errorResponse(decision.status, decision.message, {
        code:
          decision.retryAfterMs !== undefined
            ? 'providers_unavailable'
            : decision.status === 429
              ? 'no_capacity_in_time'
              : 'no_capacity',
        headers: { 'retry-after': retryAfter, 'x-kinference-policy': policy.name },
      });
    }
  }

  /**
   * Waits (at most `maxMs`) in line for a pod: 'turn' when the pool changed and this request is
   * the first in order that `canAct`; 'full' at once when the bound on waiting requests is
   * reached by its class or higher; 'shed' when a higher class took its place. Throws when the
   * client leaves. Adds the wait to the record.
   */
  async waitInLine(
    who: { tenant: string; priority: Priority; maxMs: number },
    canAct: () => boolean,
    signal: AbortSignal,
    record: RequestRecord,
  ): Promise<'turn' | 'timeout' | 'full' | 'shed'> {
    const deps = this.deps;
    const waitStarted = deps.now();
    let woke: Awaited<ReturnType<WaitingRoom['wait']>>;
    try {
      woke = await this.waiting.wait(
        { tenant: who.tenant, priority: who.priority, deadline: waitStarted + who.maxMs },
        canAct,
        signal,
      );
    } catch (error) {
      deps.metrics.waits.inc({ outcome: 'cancelled' });
      throw error;
    } finally {
      record.waitedMs = Math.round(record.waitedMs + deps.now() - waitStarted);
    }
    if (woke === 'full' || woke === 'shed') deps.metrics.waits.inc({ outcome: woke });
    return woke;
  }

  /** One attempt at one pod. Undefined: it failed before the first byte and another may be tried. */
  async #sendToPod(
    candidate: Candidate,
    parsed: ParsedRequest,
    body: Uint8Array,
    request: RouteRequest,
    admitted: Scored,
    slo: { leavable: boolean; started: number; sloTtftMs: number },
    signal: AbortSignal,
    ctx: RequestContext,
  ): Promise<Response | undefined> {
    const deps = this.deps;
    const route = candidateName(candidate);
    const predictedMs = admitted.predictedMs;
    const ticket = deps.pool.begin(candidate, request.promptTokens, request.kind, parsed.stream, request.promptBlocks);
    deps.metrics.prefixTokens.inc({ kind: 'prompt' }, request.promptTokens);
    const cached = Math.min(candidate.expectedCachedTokens ?? 0, request.promptTokens);
    if (cached > 0) deps.metrics.prefixTokens.inc({ kind: 'expected_cached' }, cached);
    const headersOut = { ...ctx.upstreamHeaders, ...deps.podAuth(candidate.pod) };
    const attempt = await sendToPod(
      deps.dispatcher,
      candidate.pod.address,
      `/v1/${API_PATHS[parsed.kind]}`,
      body,
      signal,
      deps.limits.pod,
      { wholeAnswer: !parsed.stream, headers: headersOut },
    );
    const headers = {
      'x-kinference-route': route,
      'x-kinference-predicted-ttft-ms': String(Math.round(predictedMs)),
    };
    if (!attempt.ok) {
      ticket.end(false);
      if (attempt.retryable) {
        ctx.lastPodError = attempt.error;
        deps.pool.markFailed(candidate);
        return undefined;
      }
      // The pod refused the request itself (e.g. prompt longer than its context): pass it on.
      return new Response((attempt.body ?? null) as BodyInit | null, {
        status: attempt.status ?? 502,
        headers: { 'content-type': attempt.contentType ?? 'application/json', ...headers },
      });
    }
    const routeLabel = candidate.where;
    const streamLabel = String(parsed.stream);
    ctx.record.ttftMs = Math.round(attempt.firstByteMs * 10) / 10;
    // Non-streamed answers arrive whole, so their first byte is the whole answer: recorded under
    // stream="false" for the operator.
    deps.metrics.upstreamTtft.observe({ route: routeLabel, stream: streamLabel }, attempt.firstByteMs / 1000);
    if (candidate.where === 'local' && attempt.firstByteMs > 0) {
      deps.metrics.predictionError.observe(
        { stream: streamLabel },
        Math.abs(predictedMs - attempt.firstByteMs) / attempt.firstByteMs,
      );
    }
    // A TTFT exists for streamed requests (first byte) and embeddings (all prefill); a non-streamed
    // generation's first byte is its whole answer, so it is not counted against the TTFT SLO.
    const measured = (ms: number) => {
      if (!parsed.stream && parsed.kind !== 'embeddings') return;
      deps.metrics.sloRequests.inc({
        route: routeLabel,
        leavable: String(slo.leavable),
        within_slo: String(deps.now() - slo.started <= slo.sloTtftMs),
      });
      if (candidate.where === 'local')
        deps.metrics.admissionCalibration.inc({
          pod: candidate.pod.name,
          within_quantile: String(ms <= admitted.quantileMs),
        });
    };
    if (parsed.stream) {
      ticket.firstByte(attempt.firstByteMs);
      measured(attempt.firstByteMs);
      if (candidate.where === 'local') {
        deps.metrics.podTtft.observe({ pod: candidate.pod.name, source: 'measured' }, attempt.firstByteMs / 1000);
        deps.metrics.podTtft.observe({ pod: candidate.pod.name, source: 'predicted' }, predictedMs / 1000);
      }
      const stream = relayStream(
        attempt.first,
        attempt.rest,
        attempt.abort,
        attempt.contentType.includes('event-stream'),
        {
          onEnd: ({ ok }) => ticket.end(ok),
          brokenStreamEnd:
            parsed.kind === 'responses'
              ? (message) => responsesErrorEvent(message, 'upstream_stream_error')
              : undefined,
        },
      );
      return new Response(stream, {
        status: attempt.status,
        headers: { 'content-type': attempt.contentType, 'cache-control': 'no-cache', ...headers },
      });
    }
    try {
      const bytes = await readRest(attempt.first, attempt.rest, deps.limits.maxUpstreamBodyBytes);
      const answerMs = attempt.firstByteMs;
      ticket.answered(answerMs);
      measured(answerMs);
      ticket.end(true);
      if (deps.requestLog.sample > 0) Object.assign(ctx.record, usageOf(bytes)); // only read when lines may be written
      return new Response(bytes as BodyInit, {
        status: attempt.status,
        headers: { 'content-type': attempt.contentType, ...headers },
      });
    } catch (error) {
      ticket.end(false);
      // Drop the rest of the answer: an unread body would hold its socket (and the dispatcher's
      // close) forever.
      attempt.abort();
      if (signal.aborted) throw error;
      return errorResponse(502, `the model server failed while answering: ${(error as Error).message}`, {
        code: 'upstream_failed',
        headers,
      });
    }
  }
}

/** The most the answer may take, as the client capped it (the overflow budget reserves it). */
function maxTokensOf(body: Record<string, unknown>): { maxTokens?: number } {
  for (const key of ['max_completion_tokens', 'max_tokens', 'max_output_tokens']) {
    const v = body[key];
    if (typeof v === 'number' && Number.isInteger(v) && v >= 0) return { maxTokens: v };
  }
  return {};
}

/** A Responses body seen as chat messages, for the prompt-size estimate: instructions + input items. */
function responsesPromptView(body: Record<string, unknown>): Record<string, unknown> {
  const instructions = typeof body.instructions === 'string' ? [{ content: body.instructions }] : [];
  if (typeof body.input === 'string') return { messages: [...instructions, { content: body.input }] };
  const items = Array.isArray(body.input) ? (body.input as unknown[]).filter((i) => i && typeof i === 'object') : [];
  return { messages: [...instructions, ...items] };
}
