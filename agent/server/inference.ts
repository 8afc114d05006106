// The life of one inference request: validate, identify, classify, resolve policy, then decide
// and act until answered — forward to a pod (retrying another before the first byte), overflow
// to providers, wait for a pod, or reject. Every answer says where it went.
import { errorResponse } from '../../shared/openai/errors.ts';
import { endOnSignal, relayStream, readRest } from '../forward/relay.ts';
import { sendToPod, type PodTimeouts } from '../forward/pod.ts';
import type { Agent as Dispatcher } from 'undici';
import { estimatePromptTokens } from '../predict/tokens.ts';
import { candidateName, decide, type Decision, type LeaveVerdict } from '../route/router.ts';
import type { Candidate } from '../route/candidate.ts';
import type { EffectivePolicy, RequestKind, RouteRequest } from '../types.ts';
import type { Metrics } from './metrics.ts';
import { parseInferenceRequest, readBoundedBody, RequestError, type ParsedRequest } from './request.ts';
import type { Identity } from './identify.ts';

export const UPSTREAM_PATHS: Record<RequestKind, string> = {
  chat: '/v1/chat/completions',
  completions: '/v1/completions',
  embeddings: '/v1/embeddings',
};

export type OverflowResult =
  | { ok: true; response: Response }
  /** 503: no provider could be reached (refused, timed out, circuit open); 502: they answered badly. */
  | { ok: false; status: 502 | 503; message: string };

/** What the request path needs from the rest of the agent. */
export interface RequestPathDeps {
  metrics: Metrics;
  dispatcher: Dispatcher;
  limits: { maxBodyBytes: number; maxRetries: number; maxWaiting: number; maxJsonDepth: number; maxUpstreamBodyBytes: number } & { pod: PodTimeouts };
  now: () => number;
  rand: () => number;
  identify(req: Request, remoteIp: string | undefined): Identity;
  classify(headerTags: string | null, body: Record<string, unknown>): string[];
  isKnownModel(model: string): boolean;
  policyFor(identity: Identity, model: string): EffectivePolicy;
  leaveVerdict(policy: EffectivePolicy, request: RouteRequest): LeaveVerdict;
  pool: {
    candidates(): Candidate[];
    /** Bookkeeping for one request sent to a pod; returns hooks for its first byte and end. */
    begin(c: Candidate, promptTokens: number): { firstByte(ms: number): void; end(ok: boolean): void };
    /** The pod failed before its first byte: keep it out of decisions for a moment. */
    markFailed(c: Candidate): void;
    /** Resolves at the next change of any candidate (scrape, gossip, a request ending). */
    nextChange(timeoutMs: number, signal: AbortSignal): Promise<'change' | 'timeout' | 'aborted'>;
  };
  /** Tries the providers in order: their answer, or why none answered. */
  overflow(request: RouteRequest, parsed: ParsedRequest, providers: readonly string[], signal: AbortSignal): Promise<OverflowResult>;
}

export function withHeaders(response: Response, headers: Record<string, string>): Response {
  const merged = new Headers(response.headers);
  for (const [k, v] of Object.entries(headers)) merged.set(k, v);
  return new Response(response.body, { status: response.status, headers: merged });
}

/** 502 after every pod tried failed before its first byte. */
function podsFailed(attempts: number): Response {
  return errorResponse(502, `the model server failed before answering (tried ${attempts} pod${attempts > 1 ? 's' : ''})`, { code: 'upstream_failed' });
}

function retryAfterSeconds(policy: EffectivePolicy): string {
  return String(Math.max(1, Math.ceil(policy.waitMaxMs / 1000)));
}

export class RequestPath {
  readonly deps: RequestPathDeps;
  #waiting = 0;
  /** Fired at the drain deadline: streams still running end with an error event and [DONE]. */
  readonly #drainDeadline = new AbortController();

  constructor(deps: RequestPathDeps) {
    this.deps = deps;
  }

  /** The routing input for a parsed request (also used by /explain). */
  routeRequest(parsed: ParsedRequest, identity: Identity, tags: string[]): RouteRequest {
    return {
      kind: parsed.kind,
      model: parsed.model,
      tenant: identity.tenant,
      namespace: identity.namespace,
      tags,
      promptTokens: estimatePromptTokens(parsed.body),
      stream: parsed.stream,
    };
  }

  /** The drain deadline passed: end every stream still running, properly. */
  endStreams(): void {
    this.#drainDeadline.abort();
  }

  /** A decision now, with no side effect: what /explain shows. */
  explain(request: RouteRequest, identity: Identity): Decision {
    const policy = this.deps.policyFor(identity, request.model);
    return decide({ request, policy, candidates: this.deps.pool.candidates(), leave: this.deps.leaveVerdict(policy, request), rand: this.deps.rand });
  }

  async handle(kind: RequestKind, req: Request, remoteIp: string | undefined): Promise<Response> {
    const { metrics } = this.deps;
    metrics.inFlight.inc();
    let route = 'rejected';
    let outcome = 'error';
    try {
      const response = await this.#handle(kind, req, remoteIp);
      route = response.headers.get('x-kinference-route')?.split('/')[0] ?? 'rejected';
      // A client that left before its answer is its own outcome, not the status we could not send.
      outcome = req.signal.aborted ? 'cancelled' : response.ok ? 'ok' : String(response.status);
      if (response.body && response.headers.get('content-type')?.includes('event-stream')) {
        const body = endOnSignal(response.body, this.#drainDeadline.signal, 'the agent is shutting down and its drain deadline passed; the answer is incomplete');
        return new Response(body, { status: response.status, headers: response.headers });
      }
      return response;
    } catch (error) {
      if (error instanceof RequestError) {
        outcome = String(error.status);
        return errorResponse(error.status, error.message, { param: error.param, code: error.code });
      }
      if (req.signal.aborted) {
        outcome = 'cancelled';
        return errorResponse(499, 'client closed the request', { code: 'client_closed' });
      }
      console.error('kinference: unexpected error on the request path', error);
      return errorResponse(500, 'internal error in the agent', { type: 'server_error' });
    } finally {
      metrics.inFlight.dec();
      metrics.requests.inc({ api: kind, route, outcome });
    }
  }

  async #handle(kind: RequestKind, req: Request, remoteIp: string | undefined): Promise<Response> {
    const deps = this.deps;
    // Pods get the client's bytes as they came: no re-serialisation on the hot path.
    const body = await readBoundedBody(req, deps.limits.maxBodyBytes);
    const parsed = parseInferenceRequest(kind, body, deps.limits.maxJsonDepth);
    if (!deps.isKnownModel(parsed.model)) {
      throw new RequestError(404, `The model \`${parsed.model}\` does not exist.`, 'model', 'model_not_found');
    }
    const identity = deps.identify(req, remoteIp);
    const tags = deps.classify(req.headers.get('x-kinference-tags'), parsed.body);
    const request = this.routeRequest(parsed, identity, tags);
    const policy = deps.policyFor(identity, parsed.model);
    const started = deps.now();
    const tried = new Set<string>();
    let podAttempts = 0;
    let waited = false;

    for (;;) {
      const leave = deps.leaveVerdict(policy, request);
      const candidates = deps.pool.candidates().filter((c) => !tried.has(c.pod.uid));
      const decision = decide({ request, policy, candidates, leave, waitedMs: deps.now() - started, rand: deps.rand });
      for (const d of decision.dropped) deps.metrics.dropped.inc({ reason: d.reason });

      if (decision.action === 'pod') {
        if (waited) {
          deps.metrics.waits.inc({ outcome: 'pod' });
          waited = false;
        }
        const chosen = decision.chosen.candidate;
        podAttempts++;
        const answer = await this.#sendToPod(chosen, parsed, body, request, decision.predictedTtftMs, req.signal);
        if (answer) return answer;
        tried.add(chosen.pod.uid);
        if (req.signal.aborted) throw new Error('client gone');
        if (podAttempts > deps.limits.maxRetries) return podsFailed(podAttempts);
        deps.metrics.retries.inc();
        continue;
      }

      // Every pod we could try failed before answering: overflow if allowed, else say so (502);
      // waiting for a pod that just failed would only delay the same answer.
      if (podAttempts > 0 && (decision.action === 'wait' || decision.action === 'reject')) return podsFailed(podAttempts);

      if (decision.action === 'overflow') {
        const result = await deps.overflow(request, parsed, decision.providers, req.signal);
        if (result.ok) return result.response;
        return errorResponse(result.status, `no pod can answer in time and ${result.message}`, {
          code: result.status === 503 ? 'providers_unavailable' : 'providers_failed',
          headers: { 'retry-after': retryAfterSeconds(policy) },
        });
      }

      if (decision.action === 'wait') {
        if (this.#waiting >= deps.limits.maxWaiting) {
          deps.metrics.waits.inc({ outcome: 'full' });
          return errorResponse(429, 'too many requests are already waiting for a pod', { code: 'wait_queue_full', headers: { 'retry-after': retryAfterSeconds(policy) } });
        }
        this.#waiting++;
        waited = true;
        try {
          const woke = await deps.pool.nextChange(decision.maxWaitMs, req.signal);
          if (woke === 'aborted') {
            deps.metrics.waits.inc({ outcome: 'cancelled' });
            throw new Error('client gone');
          }
        } finally {
          this.#waiting--;
        }
        continue;
      }

      if (decision.status === 429 || decision.retryAfterMs !== undefined) deps.metrics.waits.inc({ outcome: 'timeout' });
      const retryAfter = decision.retryAfterMs !== undefined ? String(Math.max(1, Math.ceil(decision.retryAfterMs / 1000))) : retryAfterSeconds(policy);
      return errorResponse(decision.status, decision.message, {
        code: decision.retryAfterMs !== undefined ? 'providers_unavailable' : decision.status === 429 ? 'no_capacity_in_time' : 'no_capacity',
        headers: { 'retry-after': retryAfter, 'x-kinference-policy': policy.name },
      });
    }
  }

  /** One attempt at one pod. Undefined: it failed before the first byte and another may be tried. */
  async #sendToPod(
    candidate: Candidate,
    parsed: ParsedRequest,
    body: Uint8Array,
    request: RouteRequest,
    predictedMs: number,
    signal: AbortSignal,
  ): Promise<Response | undefined> {
    const deps = this.deps;
    const route = candidateName(candidate);
    const ticket = deps.pool.begin(candidate, request.promptTokens);
    const attempt = await sendToPod(deps.dispatcher, candidate.pod.address, UPSTREAM_PATHS[parsed.kind], body, signal, deps.limits.pod);
    const headers = {
      'x-kinference-route': route,
      'x-kinference-predicted-ttft-ms': String(Math.round(predictedMs)),
    };
    if (!attempt.ok) {
      ticket.end(false);
      if (attempt.retryable) {
        deps.pool.markFailed(candidate);
        return undefined;
      }
      // The pod refused the request itself (e.g. prompt longer than its context): pass it on.
      return new Response((attempt.body ?? null) as BodyInit | null, { status: attempt.status ?? 502, headers: { 'content-type': attempt.contentType ?? 'application/json', ...headers } });
    }
    const routeLabel = candidate.where;
    if (parsed.stream) {
      ticket.firstByte(attempt.firstByteMs);
      deps.metrics.upstreamTtft.observe({ route: routeLabel }, attempt.firstByteMs / 1000);
      if (candidate.where === 'local' && attempt.firstByteMs > 0) {
        deps.metrics.predictionError.observe(Math.abs(predictedMs - attempt.firstByteMs) / attempt.firstByteMs);
      }
      const stream = relayStream(attempt.first, attempt.rest, attempt.abort, attempt.contentType.includes('event-stream'), {
        onEnd: ({ ok }) => ticket.end(ok),
      });
      return new Response(stream, { status: attempt.status, headers: { 'content-type': attempt.contentType, 'cache-control': 'no-cache', ...headers } });
    }
    try {
      const bytes = await readRest(attempt.first, attempt.rest, deps.limits.maxUpstreamBodyBytes);
      ticket.end(true);
      return new Response(bytes as BodyInit, { status: attempt.status, headers: { 'content-type': attempt.contentType, ...headers } });
    } catch (error) {
      ticket.end(false);
      // Drop the rest of the answer: an unread body would hold its socket (and the dispatcher's
      // close) forever.
      attempt.abort();
      if (signal.aborted) throw error;
      return errorResponse(502, `the model server failed while answering: ${(error as Error).message}`, { code: 'upstream_failed', headers });
    }
  }
}
