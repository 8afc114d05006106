// One request sent to one pod and its answer made, the same for inference (pod-attempt.ts) and
// passthrough routes: the send, the pool's bookkeeping, a failure before the first byte (the pod
// marked, another may be tried), a refusal passed on, a stream relayed or a whole answer read up
// to limits.maxUpstreamBodyBytes. What is measured around it is the caller's (hooks).
import { readRest } from '../../forward/relay.ts';
import { sendToPod, type ClientPresence, type PodAttempt } from '../../forward/pod.ts';
import type { Candidate } from '../../route/candidate.ts';
import type { RequestContext, RequestPathDeps } from './path-deps.ts';
import { errorAnswer, podStreamAnswer, type Answer } from './answers.ts';

type Answered = Extract<PodAttempt, { ok: true }>;
/** The pool's booking of one request (agent/pool/ticket.ts). */
type PodTicket = ReturnType<RequestPathDeps['pool']['begin']>;

/** What goes to the pod, and the headers its answer carries (route, prediction). */
export interface PodSend {
  path: string;
  body: Uint8Array;
  headers: Record<string, string>;
  /** Not streamed: the pod's headers wait for the whole answer (the response timeout, not connect). */
  wholeAnswer: boolean;
  answerHeaders: Record<string, string>;
}

/** The caller's part: the pool's bookkeeping and what it measures of the answer. */
export interface PodSendHooks {
  /** Books the request with the pool, called once it is on its way (in the same turn). */
  begin(): PodTicket;
  /** Whether the answer is relayed as a stream. */
  streamed(attempt: Answered): boolean;
  /** A broken stream's last event, in the API's own shape. */
  brokenEnd?: (message: string) => string;
  /** A stream's first bytes are out (or it ended first): run once, before the pod's slot frees. */
  firstBytes?(ticket: PodTicket, firstByteMs: number, answeredAt: number): void;
  /** A whole answer was written. */
  answered?(ticket: PodTicket, firstByteMs: number, answeredAt: number, bytes: Uint8Array): void;
  /** A whole answer failed while it was read. */
  broken?(firstByteMs: number): void;
}

/** The pod's answer. Undefined: it failed before the first byte, was marked, and another may be tried. */
export async function sendToOnePod(
  deps: RequestPathDeps,
  candidate: Candidate,
  send: PodSend,
  signal: ClientPresence,
  ctx: RequestContext,
  hooks: PodSendHooks,
): Promise<Answer | undefined> {
  const sending = sendToPod(deps.dispatcher, candidate.pod.address, send.path, send.body, signal, deps.limits.pod, {
    wholeAnswer: send.wholeAnswer,
    headers: send.headers,
  });
  // The pool's bookkeeping once the request is on its way (an idle connection writes it within
  // the call above): in the same turn, so no other request is decided between the two, but the pod
  // starts on it sooner.
  const ticket = hooks.begin();
  const attempt = await sending;
  const headers = send.answerHeaders;
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
  const firstByteMs = attempt.firstByteMs;
  ctx.record.ttftMs = Math.round(firstByteMs * 10) / 10;
  if (hooks.streamed(attempt)) {
    // Learned once the first bytes are out (or sooner, if the stream ends first: the learning
    // comes before the pod's slot is freed, as it did when it ran here).
    const answeredAt = deps.now();
    const settle = once(() => hooks.firstBytes?.(ticket, firstByteMs, answeredAt));
    const answer = podStreamAnswer(attempt, headers, {
      brokenEnd: hooks.brokenEnd,
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
    const answeredAt = deps.now();
    return {
      status: attempt.status,
      headers: { 'content-type': attempt.contentType, ...headers },
      body: bytes,
      settle: () => {
        hooks.answered?.(ticket, firstByteMs, answeredAt, bytes);
        ticket.end(true);
      },
    };
  } catch (error) {
    hooks.broken?.(firstByteMs);
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
