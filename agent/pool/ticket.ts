// One request's bookkeeping at one pod, from send to end: the counts the router sees between two
// reports of the pod, and (for local pods) what the model learns from the times measured.
import type { Learner } from '../predict/learner.ts';
import type { Features } from '../predict/predictor.ts';
import type { RequestKind } from '../types.ts';
import type { RequestCounters } from './pod-records.ts';

export interface PodTicket {
  /** Mean predicted TTFT the request was sent on (NaN for peers' pods). */
  predictedMs: number;
  firstByte(ms: number): void;
  answered(ms: number): void;
  end(ok: boolean): void;
}

export interface TicketRequest {
  counters: RequestCounters;
  /** Local pods only: the pod the learner predicts and learns for. Peers' pods learn nothing here. */
  learnsAs: string | undefined;
  learner: Learner;
  kind: RequestKind;
  stream: boolean;
  /** Features at send time, with the prompt tokens the pod has not cached. */
  features: Features;
  now: () => number;
  /** The pool's change signal: a request ending frees a slot waiters may take. */
  changed: () => void;
  /** Called once, when its prompt has been prefilled (first token, answer or end). */
  prefilled?: () => void;
  /** Called once, when the request ends (`ok`: answered). */
  ended?: (ok: boolean) => void;
}

export function openTicket(r: TicketRequest): PodTicket {
  const { counters, learnsAs: uid, learner, kind, features } = r;
  const predictedMs = uid !== undefined ? learner.predict(uid, kind, features) : NaN;
  const epoch = counters.epoch;
  counters.inFlight++;
  counters.unseenSent++;
  // A non-streamed request's prefill ends unseen (its first byte is its whole answer): counted
  // until the answer, its prompt would stand in front of later requests for its whole decode.
  // The scraped queue and batch show it instead.
  const counted = r.stream || kind === 'embeddings' ? features.promptTokens : 0;
  const awaited = r.stream || kind === 'embeddings' ? 1 : 0;
  counters.pendingPromptTokens += counted;
  counters.pendingRequests += awaited;
  let pending = true;
  let ended = false;
  // Its prompt stops standing in front of later requests once its first token is out.
  const prefilled = () => {
    if (!pending) return;
    pending = false;
    r.prefilled?.();
    counters.pendingPromptTokens -= counted;
    counters.pendingRequests -= awaited;
  };
  // Each observation makes the pod's params new; built here, after the answer went out, the next
  // decision (which reads them for every local candidate) finds them ready.
  const ready = () => {
    if (uid === undefined) return;
    if (kind === 'embeddings') learner.embeddingParams(uid);
    else learner.params(uid);
  };
  const learn = (ms: number) => {
    if (uid === undefined) return;
    learner.observeTtft(uid, kind, features, predictedMs, ms, r.now());
    ready();
  };
  return {
    predictedMs,
    firstByte: (ms: number) => {
      prefilled();
      learn(ms);
    },
    answered: (ms: number) => {
      prefilled();
      // An embedding's answer time is its prefill: a TTFT, learned as one.
      if (kind === 'embeddings') return learn(ms);
      // A generation's answer time holds its decode too: only a bound (see Learner.observeAnswer).
      if (uid === undefined) return;
      learner.observeAnswer(uid, kind, features, predictedMs, ms);
      ready();
    },
    end: (ok: boolean) => {
      if (ended) return;
      ended = true;
      prefilled();
      counters.inFlight--;
      r.ended?.(ok);
      // Finished before the next report: the pod holds nothing of it, so it is no unseen queue.
      // (Left counted, a fast pod answering hundreds of short requests between two scrapes
      // would look hundreds deep and be throttled far below its capacity.)
      if (counters.epoch === epoch && counters.unseenSent > 0) counters.unseenSent--;
      r.changed();
    },
  };
}
