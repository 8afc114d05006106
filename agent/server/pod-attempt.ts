// One attempt at one pod: send the client's bytes, relay or read the answer, and measure it
// (TTFT, prediction error, SLO and calibration counters, prefix tokens).
import { responsesErrorEvent } from '../../shared/openai/errors.ts';
import { readRest } from '../forward/relay.ts';
import { sendToPod, type ClientPresence } from '../forward/pod.ts';
import { candidateName } from '../route/router.ts';
import type { Candidate } from '../route/candidate.ts';
import type { Scored } from '../route/picker.ts';
import { API_PATHS, type RouteRequest } from '../types.ts';
import type { ParsedRequest } from './request.ts';
import { usageOf } from '../../shared/openai/usage.ts';
import type { RequestContext, RequestPathDeps } from './path-deps.ts';
import { errorAnswer, podStreamAnswer, type Answer } from './answers.ts';
import { anthropicErrorEvent } from './anthropic.ts';

/** One attempt at one pod. Undefined: it failed before the first byte and another may be tried. */
export async function attemptPod(
  deps: RequestPathDeps,
  candidate: Candidate,
  parsed: ParsedRequest,
  body: Uint8Array,
  request: RouteRequest,
  admitted: Scored,
  slo: { leavable: boolean; started: number; sloTtftMs: number; measured?: (within: boolean) => void },
  signal: ClientPresence,
  ctx: RequestContext,
  /** The attempt span's trace context (agent/server/tracing.ts), replacing the caller's. */
  traceHeaders?: Record<string, string>,
): Promise<Answer | undefined> {
  const route = candidateName(candidate);
  const predictedMs = admitted.predictedMs;
  const headersOut = { ...ctx.upstreamHeaders, ...traceHeaders, ...deps.podAuth(candidate.pod) };
  const sending = sendToPod(
    deps.dispatcher,
    candidate.pod.address,
    `/v1/${API_PATHS[parsed.kind]}`,
    body,
    signal,
    deps.limits.pod,
    { wholeAnswer: !parsed.stream, headers: headersOut },
  );
  // The pool's bookkeeping once the request is on its way (an idle connection writes it within
  // the call above): in the same turn, so no other request is decided between the two, but the pod
  // starts on it sooner.
  const ticket = deps.pool.begin(
    candidate,
    request.promptTokens,
    request.kind,
    parsed.stream,
    request.promptBlocks,
    request.model,
  );
  deps.metrics.prefixTokens.add(request.promptTokens, 'prompt');
  const cached = Math.min(candidate.expectedCachedTokens ?? 0, request.promptTokens);
  if (cached > 0) deps.metrics.prefixTokens.add(cached, 'expected_cached');
  const attempt = await sending;
  const headers = {
    'x-kinference-route': route,
    'x-kinference-predicted-ttft-ms': String(Math.round(predictedMs)),
  };
  if (!attempt.ok) {
    ticket.end(false);
    if (attempt.retryable) {
      ctx.lastPodError = attempt.error;
      // A status means the pod answered (429, 5xx, our key refused): it is up, only unwell.
      deps.pool.markFailed(candidate, attempt.status === undefined ? 'unreachable' : 'answered');
      return undefined;
    }
    // The pod refused the request itself (e.g. prompt longer than its context): pass it on.
    return {
      status: attempt.status ?? 502,
      headers: { 'content-type': attempt.contentType ?? 'application/json', ...headers },
      body: attempt.body,
    };
  }
  const routeLabel = candidate.where;
  const streamLabel = String(parsed.stream);
  const firstByteMs = attempt.firstByteMs;
  ctx.record.ttftMs = Math.round(firstByteMs * 10) / 10;
  const observeTtft = () => {
    // Non-streamed answers arrive whole, so their first byte is the whole answer: recorded under
    // stream="false" for the operator.
    deps.metrics.upstreamTtft.observe(firstByteMs / 1000, routeLabel, streamLabel);
    if (candidate.where === 'local' && firstByteMs > 0)
      deps.metrics.predictionError.observe(Math.abs(predictedMs - firstByteMs) / firstByteMs, streamLabel);
  };
  // A TTFT exists for streamed requests (first byte) and embeddings (all prefill); a non-streamed
  // generation's first byte is its whole answer, so it is not counted against the TTFT SLO.
  // `answeredAt` is read when the answer is in hand, before the write, and counted after it.
  const measured = (ms: number, answeredAt: number) => {
    if (!parsed.stream && parsed.kind !== 'embeddings') return;
    const within = answeredAt - slo.started <= slo.sloTtftMs;
    deps.metrics.sloRequests.add(1, routeLabel, String(slo.leavable), String(within));
    slo.measured?.(within);
    if (candidate.where === 'local')
      deps.metrics.admissionCalibration.add(1, candidate.pod.name, String(ms <= admitted.quantileMs));
  };
  if (parsed.stream) {
    // Learned once the first bytes are out (or sooner, if the stream ends first: the learning
    // comes before the pod's slot is freed, as it did when it ran here).
    const answeredAt = deps.now();
    const settle = once(() => {
      observeTtft();
      ticket.firstByte(firstByteMs);
      measured(firstByteMs, answeredAt);
      if (candidate.where === 'local') {
        deps.metrics.podTtft.observe(firstByteMs / 1000, candidate.pod.name, 'measured');
        deps.metrics.podTtft.observe(predictedMs / 1000, candidate.pod.name, 'predicted');
      }
    });
    const answer = podStreamAnswer(attempt, headers, {
      brokenEnd:
        parsed.kind === 'responses'
          ? (message) => responsesErrorEvent(message, 'upstream_stream_error')
          : parsed.kind === 'messages'
            ? anthropicErrorEvent
            : undefined,
      onEnd: ({ ok }) => {
        settle();
        ticket.end(ok);
      },
    });
    answer.settle = settle;
    return answer;
  }
  try {
    const bytes = await readRest(attempt.first, attempt.rest, deps.limits.maxUpstreamBodyBytes);
    const record = ctx.record;
    const answeredAt = deps.now();
    return {
      status: attempt.status,
      headers: { 'content-type': attempt.contentType, ...headers },
      body: bytes,
      settle: () => {
        observeTtft();
        ticket.answered(firstByteMs);
        measured(firstByteMs, answeredAt);
        ticket.end(true);
        if (deps.requestLog.sample > 0) Object.assign(record, usageOf(bytes)); // only read when lines may be written
      },
    };
  } catch (error) {
    observeTtft();
    ticket.end(false);
    // Drop the rest of the answer: an unread body would hold its socket (and the dispatcher's
    // close) forever.
    attempt.abort();
    if (signal.aborted) throw error;
    return errorAnswer(502, `the model server failed while answering: ${(error as Error).message}`, {
      code: 'upstream_failed',
      headers,
    });
  }
}

/** `fn` run at most once, by whichever caller comes first. */
function once(fn: () => void): () => void {
  let done = false;
  return () => {
    if (done) return;
    done = true;
    fn();
  };
}
