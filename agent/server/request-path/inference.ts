// The life of one inference request: validate, identify, classify, resolve policy, then decide
// and act until answered — forward to a pod (retrying another before the first byte), overflow
// to providers, wait for a pod, or reject. Every answer says where it went. The pieces live
// beside it: path-deps (what it needs), serve (the per-request record), pod-attempt (one pod
// try and its measurement), pod-send (the send every pod request shares), route-outcomes (the
// overflow and the refusal that end the loop), waiting-line (the ordered wait), route-request, answers.
import type { ApiRequest, ApiResponse } from '../exchange.ts';
import { randomUUID } from 'node:crypto';
import { candidateName, decide, type Decision, type LeaveVerdict } from '../../route/router.ts';
import type { Candidate } from '../../route/candidate.ts';
import type { RequestKind, RouteRequest } from '../../types.ts';
import { BoundedLabel } from '../observability/metrics.ts';
import { parseInferenceRequest, readBoundedBody, RequestError, type ParsedRequest } from '../bodies/request.ts';
import type { Identity } from './identify.ts';
import type { RequestRecord } from '../observability/evidence.ts';
import { WaitingRoom } from '../../admission/waiting.ts';
import { AdmissionThresholds, type AdmissionThreshold } from '../../admission/threshold.ts';
import { plannedMissChance } from '../../admission/planned-miss.ts';
import { LeavableAhead } from '../../admission/leavable-ahead.ts';
import { DEFAULT_PRIORITY, PRIORITY_HEADER, priorityOf, type Priority } from '../../budget/limits.ts';
import type { RequestContext, RequestPathDeps } from './path-deps.ts';
import { RequestRecorder } from './serve.ts';
import { attemptPod } from './pod-attempt.ts';
import { waitInLine } from './waiting-line.ts';
import { buildRouteRequest } from '../bodies/route-request.ts';
import { errorAnswer, podsFailed, retryAfterSeconds, type Answer } from './answers.ts';
import { ClientRequest } from './client-request.ts';
import { requestPathLimits } from './path-deps.ts';
import { createPodDispatcher, podAuthFrom } from '../../forward/pod.ts';
import type { AgentSettings } from '../../config/load.ts';
import type { Callers } from './caller.ts';
import type { Overflow } from '../../providers/overflow.ts';
import { bodyOffloadFor, parsedFromVerdict, routeFromVerdict } from '../bodies/body-offload.ts';
import { NO_TRACE, type RequestTrace } from '../observability/request-trace.ts';
import { SessionAffinity } from './sessions.ts';
import { anthropicShaped } from './anthropic.ts';
import { stickToSession } from '../../route/session.ts';
import type { BodyVerdict } from '../bodies/body-work.ts';
import { overflowAnswer, refusal, type Routing } from './route-outcomes.ts';

// Importers (agent, passthrough, tests) keep importing the request path's API from here.
export type { RequestContext, RequestPathDeps } from './path-deps.ts';
export type { OverflowResult } from '../../providers/overflow.ts';

/** The measured TTFT as a span attribute, when there is one. */
const ttftAttribute = (ms: number | undefined) => (ms === undefined ? undefined : { 'kinference.ttft_ms': ms });

/** The agent's request path from its settings, over its callers, overflow and pool; owns its pod dispatcher. */
export function requestPathFor(
  settings: AgentSettings,
  parts: Pick<RequestPathDeps, 'metrics' | 'now' | 'rand' | 'pool' | 'isKnownModel' | 'promptTokenIds' | 'traces'> & {
    log(level: 'warn' | 'error', message: string): void;
    /** Where sampled per-request JSON lines go (default: stdout). */
    writeLog?: (line: string) => void;
    callers: Callers;
    overflow: Overflow;
  },
): RequestPath {
  const { callers, overflow, writeLog, ...shared } = parts;
  return new RequestPath({
    ...shared,
    dispatcher: createPodDispatcher(settings.limits.maxConnectionsPerPod),
    limits: requestPathLimits(settings.limits),
    newRequestId: randomUUID,
    requestLog: {
      sample: settings.requestLogSample,
      write: writeLog ?? ((line) => process.stdout.write(`${line}\n`)),
    },
    podAuth: podAuthFrom(settings.podCredentials, shared.log),
    ...(settings.sessions ? { sessions: new SessionAffinity(settings.sessions, shared.now) } : {}),
    identify: (req, ip) => callers.identify(req, ip),
    classify: (tags, body, headers) => callers.classifyCounted(tags, body, headers),
    bodies: bodyOffloadFor(settings, callers, shared.log),
    policyFor: (who, model) => callers.policyFor(who, model),
    leaveVerdict: (policy, request) => overflow.leaveVerdict(policy, request),
    overflow: (request, parsed, names, signal, headers, policy) =>
      overflow.send(request, parsed, names, signal, headers, policy),
  });
}

export class RequestPath {
  readonly deps: RequestPathDeps;
  /** Requests waiting for a pod, woken in order (priority, fair across tenants, FCFS within one). */
  readonly waiting: WaitingRoom;
  /** Per policy, the admission quantile steered by the attainment measured of what pods served. */
  readonly admission = new AdmissionThresholds();
  /** Per pod, the loops whose admitted requests await their first token there (ahead of later ones). */
  readonly #leavableAhead = new LeavableAhead<AdmissionThreshold>();
  readonly #tenantLabel: BoundedLabel;
  readonly #recorder: RequestRecorder;

  constructor(deps: RequestPathDeps) {
    this.deps = deps;
    this.#tenantLabel = new BoundedLabel(deps.limits.maxLabelValues);
    this.#recorder = new RequestRecorder(deps, deps.limits.maxLabelValues);
    this.waiting = new WaitingRoom({
      maxWaiting: deps.limits.maxWaiting,
      now: deps.now,
      nextChange: (ms, signal) => deps.pool.nextChange(ms, signal),
    });
  }

  /** The routing input for a parsed request (also used by /explain). */
  routeRequest(parsed: ParsedRequest, identity: Identity, tags: string[]): RouteRequest {
    return this.#withTokens(buildRouteRequest(parsed, identity, tags, this.deps.limits.prefixMaxBlocks), parsed);
  }

  /** With a tokenizer for the model: the prompt's token ids (the precise index's key) and its exact size. */
  #withTokens(request: RouteRequest, parsed: ParsedRequest): RouteRequest {
    if (parsed.kind === 'embeddings' || !this.deps.promptTokenIds) return request;
    const ids = this.deps.promptTokenIds(parsed.model, parsed.body);
    return ids?.length ? { ...request, promptTokenIds: ids, promptTokens: ids.length } : request;
  }

  /** The drain deadline passed: end every stream still running, properly. */
  endStreams(): void {
    this.#recorder.endStreams();
  }

  /** A decision now, with no side effect: what /explain shows. */
  explain(request: RouteRequest, identity: Identity): Decision {
    const policy = this.deps.policyFor(identity, request.model);
    return decide({
      request,
      policy,
      candidates: this.deps.pool.candidates(request.model, request.promptBlocks, tokensOf(request)),
      leave: this.deps.leaveVerdict(policy, request),
      rand: this.deps.rand,
      admissionQuantile: this.admission.for(policy.name, policy.sloAttainment).quantile,
    });
  }

  /** Runs `serve` for one request with its id, metrics and (sampled) log line, and writes its
   *  answer to `res`; both the inference routes and the passthrough routes go through here. */
  serve(
    api: string,
    req: ClientRequest,
    res: ApiResponse,
    serve: (ctx: RequestContext) => Promise<Answer>,
  ): Promise<void> {
    return this.#recorder.serve(api, req, res, serve);
  }

  /** Serves one inference request of `kind` from node:http, its answer written straight to `res`. */
  handle(kind: RequestKind, incoming: ApiRequest, res: ApiResponse): Promise<void> {
    const req = new ClientRequest(incoming, res);
    if (kind !== 'messages') return this.serve(kind, req, res, (ctx) => this.#handle(kind, req, ctx));
    // Anthropic clients read Anthropic errors: the same answers, reshaped.
    return this.serve(kind, req, res, async (ctx) => {
      try {
        return anthropicShaped(await this.#handle(kind, req, ctx));
      } catch (error) {
        if (!(error instanceof RequestError)) throw error;
        return anthropicShaped(errorAnswer(error.status, error.message, { code: error.code ?? undefined }));
      }
    });
  }

  async #handle(kind: RequestKind, req: ClientRequest, ctx: RequestContext): Promise<Answer> {
    const deps = this.deps;
    // Pods get the client's bytes as they came: no re-serialisation on the hot path.
    const body = await readBoundedBody(req, deps.limits.maxBodyBytes);
    const headerTags = req.headers.get('x-kinference-tags');
    // A large body is judged on a worker thread (same code, same verdict), off the event loop.
    const judged = deps.bodies?.takes(body.byteLength) ? await deps.bodies.judge(kind, body, headerTags) : undefined;
    if (judged && !judged.ok) throw new RequestError(judged.status, judged.message, judged.param, judged.code);
    const parsed = judged
      ? parsedFromVerdict(kind, body, judged)
      : parseInferenceRequest(kind, body, deps.limits.maxJsonDepth);
    if (!deps.isKnownModel(parsed.model)) {
      throw new RequestError(404, `The model \`${parsed.model}\` does not exist.`, 'model', 'model_not_found');
    }
    const spans = deps.traces?.(req.headers, kind, parsed.model) ?? NO_TRACE;
    try {
      const answer = await this.#route(req, ctx, body, judged, headerTags, parsed, spans);
      spans.end(answer.status, answer.headers['x-kinference-route']);
      return answer;
    } catch (error) {
      spans.end(error instanceof RequestError ? error.status : 500, undefined, (error as Error).message);
      throw error;
    }
  }

  /** Who is calling, what the request carries and which policy governs it; written to its record. */
  #routing(
    req: ClientRequest,
    ctx: RequestContext,
    body: Uint8Array,
    judged: Extract<BodyVerdict, { ok: true }> | undefined,
    headerTags: string | null,
    parsed: ParsedRequest,
    spans: RequestTrace,
  ): Routing {
    const deps = this.deps;
    const record = ctx.record;
    const identity = deps.identify(req, req.remoteIp);
    // The header values that may go to a provider are classified with the body: a request id
    // or tracestate that holds an address keeps the request home like the body would.
    const tags = judged
      ? deps.bodies!.counted(judged.classification, ctx.upstreamHeaders)
      : deps.classify(headerTags, parsed.body, ctx.upstreamHeaders);
    const request = judged
      ? { ...this.#withTokens(routeFromVerdict(judged, identity), parsed), tags }
      : this.routeRequest(parsed, identity, tags);
    const policy = deps.policyFor(identity, parsed.model);
    const session = deps.sessions?.keyOf(identity.tenant, req.headers, parsed.body);
    record.model = parsed.model;
    record.tenant = identity.tenant;
    record.namespace = identity.namespace;
    record.policy = policy.name;
    record.tags = tags;
    record.stream = parsed.stream;
    record.promptTokensEstimate = request.promptTokens;
    const started = deps.now();
    return { req, ctx, body, parsed, request, policy, started, spans, session };
  }

  async #route(
    req: ClientRequest,
    ctx: RequestContext,
    body: Uint8Array,
    judged: Extract<BodyVerdict, { ok: true }> | undefined,
    headerTags: string | null,
    parsed: ParsedRequest,
    spans: RequestTrace,
  ): Promise<Answer> {
    const deps = this.deps;
    const record = ctx.record;
    const routing = this.#routing(req, ctx, body, judged, headerTags, parsed, spans);
    const { request, policy, started, session } = routing;
    const tried = new Set<string>();
    const triedNames: string[] = [];
    const untried = (candidates: Candidate[]) =>
      tried.size === 0 ? candidates : candidates.filter((c) => !tried.has(c.pod.uid));
    let podAttempts = 0;
    let waited = false;
    const priority = priorityOf(policy.priority ?? DEFAULT_PRIORITY, req.headers.get(PRIORITY_HEADER) ?? undefined);
    const admission = this.admission.for(policy.name, policy.sloAttainment);
    /** A decision on the pool as it is now, for this request's leave verdict; no side effect. */
    const decideNow = (leave: LeaveVerdict) =>
      decide({
        request,
        policy,
        candidates: untried(deps.pool.candidates(request.model, request.promptBlocks, tokensOf(request))),
        leave,
        waitedMs: deps.now() - started,
        rand: deps.rand,
        admissionQuantile: admission.quantile,
      });
    /** Whether a change in the pool lets this request act now: a pod for it, or it may leave. */
    const canAct = () => {
      const d = decideNow(deps.leaveVerdict(policy, request));
      return d.action === 'pod' || d.action === 'overflow';
    };

    for (;;) {
      const leave = deps.leaveVerdict(policy, request);
      admission.expire(deps.now());
      const decision = stickToSession(decideNow(leave), deps.sessions?.podOf(session));
      for (const d of decision.dropped) deps.metrics.dropped.add(1, d.reason);
      spans.decided(decision);

      if (decision.action === 'pod') {
        if (waited) {
          deps.metrics.waits.inc({ outcome: 'pod' });
          waited = false;
        }
        const chosen = decision.chosen.candidate;
        podAttempts++;
        record.podAttempts = podAttempts;
        record.predictedTtftMs = Math.round(decision.predictedTtftMs * 10) / 10;
        const answer = await this.#tryPod(routing, decision, leave, admission);
        if (answer) return answer;
        tried.add(chosen.pod.uid);
        triedNames.push(candidateName(chosen));
        if (req.aborted) throw new Error('client gone');
        if (podAttempts > deps.limits.maxRetries) return podsFailed(podAttempts, ctx.lastPodError, triedNames);
        deps.metrics.retries.inc();
        continue;
      }

      // A pod failed before answering, and the request goes back through the decision: overflow
      // if its data may leave, else wait for a healthy pod that is only busy. With none left
      // (every pod it may use failed, or is ejected or stale) waiting would only delay a 502.
      if (podAttempts > 0 && (decision.action === 'wait' || decision.action === 'reject') && !anyHealthy(decision))
        return podsFailed(podAttempts, ctx.lastPodError, triedNames);

      if (decision.action === 'overflow') return overflowAnswer(deps, routing, decision, podAttempts);

      if (decision.action === 'wait') {
        const refused = await this.#wait(routing, decision, priority, canAct);
        if (refused) return refused;
        waited = true;
        continue;
      }

      return refusal(deps, routing, decision, leave, this.#tenantLabel);
    }
  }

  /** One attempt at the decided pod, traced; undefined: it failed before its first byte. */
  async #tryPod(
    routing: Routing,
    decision: Extract<Decision, { action: 'pod' }>,
    leave: LeaveVerdict,
    admission: AdmissionThreshold,
  ): Promise<Answer | undefined> {
    const deps = this.deps;
    const { req, ctx, body, parsed, request, policy, started, spans, session } = routing;
    const chosen = decision.chosen.candidate;
    // Requests that may leave were admitted on the loop's quantile: their TTFT steers it (those
    // whose TTFT is measured: streams and embeddings), or their deadline if it passes first.
    const ttftMeasured = parsed.stream || parsed.kind === 'embeddings';
    const settle =
      leave.allowed && ttftMeasured
        ? admission.admitted(started, policy.sloTtftMs, plannedMissChance(decision.chosen, policy.sloTtftMs))
        : undefined;
    // A request that may not leave and misses its SLO is a miss of the loops whose requests were
    // ahead of it at the pod (leavable-ahead.ts); one that may leave is ahead of later ones until
    // its first token.
    const ahead = (!leave.allowed && ttftMeasured ? this.#leavableAhead.at(chosen.pod.uid) : []).map((loop) => ({
      loop,
      admissionsThen: loop.admissions, // those ahead were admitted by then: an episode's if it began later
    }));
    const firstTokenOut = settle && this.#leavableAhead.sent(chosen.pod.uid, admission);
    const slo = {
      leavable: leave.allowed,
      started,
      sloTtftMs: policy.sloTtftMs,
      measured: (within: boolean) => {
        if (settle) settle(deps.now(), within);
        else if (!within) for (const { loop, admissionsThen } of ahead) loop.starved(deps.now(), admissionsThen);
      },
    };
    const span = spans.attempt(chosen, decision.chosen.predictedMs);
    let answer: Answer | undefined;
    try {
      answer = await attemptPod(deps, chosen, parsed, body, request, decision.chosen, slo, req, ctx, span.headers);
    } catch (error) {
      span.end({ ok: false, error: (error as Error).message });
      throw error;
    } finally {
      firstTokenOut?.(); // its first byte is in hand, or it failed
    }
    span.end(
      answer
        ? { ok: answer.status < 400, status: answer.status, attributes: ttftAttribute(ctx.record.ttftMs) }
        : { ok: false, error: ctx.lastPodError ?? 'failed before the first byte' },
    );
    if (answer && answer.status < 400) deps.sessions?.served(session, chosen.pod.uid);
    if (!answer) settle?.(deps.now()); // failed before its first byte: not an outcome (the retry is one)
    return answer;
  }

  /** Waits in line for a pod as the decision allows; an answer only when the line refused it. */
  async #wait(
    routing: Routing,
    decision: Extract<Decision, { action: 'wait' }>,
    priority: Priority,
    canAct: () => boolean,
  ): Promise<Answer | undefined> {
    const { req, ctx, request, policy, spans } = routing;
    const record = ctx.record;
    const waitEnded = spans.waiting(decision.maxWaitMs);
    const woke = await this.waitInLine(
      { tenant: request.tenant, priority, maxMs: decision.maxWaitMs },
      canAct,
      req.signal,
      record,
    ).catch((error: unknown) => {
      waitEnded('cancelled');
      throw error;
    });
    waitEnded(woke);
    if (woke === 'full' || woke === 'shed') {
      const message =
        woke === 'full'
          ? 'too many requests are already waiting for a pod'
          : 'too many requests are waiting for a pod: its place went to one of a higher priority or of a tenant with fewer waiting';
      return errorAnswer(429, message, {
        code: 'wait_queue_full',
        headers: { 'retry-after': retryAfterSeconds(policy) },
      });
    }
    return undefined;
  }

  /**
   * Waits (at most `maxMs`) in line for a pod: 'turn' when the pool changed and this request is
   * the first in order that `canAct`; 'full' at once when the bound on waiting requests is
   * reached and it may displace nobody; 'shed' when a higher class, or a tenant under its share, took its place. Throws when the
   * client leaves. Adds the wait to the record.
   */
  async waitInLine(
    who: { tenant: string; priority: Priority; maxMs: number },
    canAct: () => boolean,
    signal: AbortSignal,
    record: RequestRecord,
  ): Promise<'turn' | 'timeout' | 'full' | 'shed'> {
    return waitInLine(this.deps, this.waiting, who, canAct, signal, record);
  }
}

/** Reasons that say a pod cannot answer at all now, rather than that it is busy or slow. */
const DOWN_REASONS: ReadonlySet<string> = new Set(['unhealthy', 'stale', 'implausible']);

/** Whether a pod this request may use is up, only too busy or slow now: worth waiting for. */
function anyHealthy(decision: Decision): boolean {
  return decision.dropped.some((d) => !DOWN_REASONS.has(d.reason));
}

/** The precise index's lookup key for a request, when its token ids are known. */
function tokensOf(request: RouteRequest): { ids: readonly number[] } | undefined {
  return request.promptTokenIds ? { ids: request.promptTokenIds } : undefined;
}
