// One inference attempt at one pod: the client's bytes sent and the answer made as every pod
// request is (pod-send.ts), measured here: TTFT, prediction error, SLO and calibration counters,
// prefix tokens, and what the pool learns.
import { responsesErrorEvent } from '../../../shared/openai/errors.ts';
import type { ClientPresence } from '../../forward/pod.ts';
import { candidateName } from '../../route/router.ts';
import type { Candidate } from '../../route/candidate.ts';
import type { Scored } from '../../route/picker.ts';
import { API_PATHS, type RouteRequest } from '../../types.ts';
import type { ParsedRequest } from '../bodies/request.ts';
import { usageOf } from '../../../shared/openai/usage.ts';
import type { RequestContext, RequestPathDeps } from './path-deps.ts';
import type { Answer } from './answers.ts';
import { sendToOnePod } from './pod-send.ts';
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
  /** The attempt span's trace context (agent/server/observability/tracing.ts), replacing the caller's. */
  traceHeaders?: Record<string, string>,
): Promise<Answer | undefined> {
  const route = candidateName(candidate);
  const predictedMs = admitted.predictedMs;
  const headersOut = { ...ctx.upstreamHeaders, ...traceHeaders, ...deps.podAuth(candidate.pod) };
  const routeLabel = candidate.where;
  const streamLabel = String(parsed.stream);
  const observeTtft = (firstByteMs: number) => {
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
  const send = {
    path: `/v1/${API_PATHS[parsed.kind]}`,
    body,
    headers: headersOut,
    wholeAnswer: !parsed.stream,
    answerHeaders: { 'x-kinference-route': route, 'x-kinference-predicted-ttft-ms': String(Math.round(predictedMs)) },
  };
  return sendToOnePod(deps, candidate, send, signal, ctx, {
    begin: () => {
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
      return ticket;
    },
    streamed: () => parsed.stream,
    brokenEnd:
      parsed.kind === 'responses'
        ? (message) => responsesErrorEvent(message, 'upstream_stream_error')
        : parsed.kind === 'messages'
          ? anthropicErrorEvent
          : undefined,
    firstBytes: (ticket, firstByteMs, answeredAt) => {
      observeTtft(firstByteMs);
      ticket.firstByte(firstByteMs);
      measured(firstByteMs, answeredAt);
      if (candidate.where === 'local') {
        deps.metrics.podTtft.observe(firstByteMs / 1000, candidate.pod.name, 'measured');
        deps.metrics.podTtft.observe(predictedMs / 1000, candidate.pod.name, 'predicted');
      }
    },
    answered: (ticket, firstByteMs, answeredAt, bytes) => {
      observeTtft(firstByteMs);
      ticket.answered(firstByteMs);
      measured(firstByteMs, answeredAt);
      if (deps.requestLog.sample > 0) Object.assign(ctx.record, usageOf(bytes)); // only read when lines may be written
    },
    broken: observeTtft,
  });
}
