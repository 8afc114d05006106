// Per-request evidence: what the agent decided for one request and what came of it, as one JSON
// log line. Pure: the record is filled along the request path; this file only shapes it.
import type { DroppedCandidate } from '../../route/router.ts';

/** One request's record. Tags are names only: never a byte of the request's text. */
export interface RequestRecord {
  /** When the request arrived (ISO 8601); formatted only when its line is written. */
  time: string;
  requestId: string;
  api: string;
  model?: string;
  tenant?: string;
  namespace?: string;
  policy?: string;
  tags: string[];
  /** x-kinference-route: local/<pod>, peer/<node>/<pod>, overflow/<provider> or rejected. */
  route: string;
  status: number;
  outcome: string;
  stream: boolean;
  /** The agent's estimate (no tokenizer): what routing used. */
  promptTokensEstimate?: number;
  /** From the answer's usage, when a non-streamed answer carries one. */
  promptTokens?: number;
  completionTokens?: number;
  predictedTtftMs?: number;
  /** First byte from upstream: the first token when streamed, the whole answer when not. */
  ttftMs?: number;
  /** Pods tried (retries included) and ms spent waiting for one. */
  podAttempts: number;
  waitedMs: number;
  /** Why no pod took an overflowed request. */
  overflowReason?: string;
  /** From handing the request to the agent until its answer's last byte. */
  durationMs?: number;
}

/**
 * Why a request went to a provider: its pods failed, or the most common reason the router gave
 * for dropping the pods that serve the model, or that none serves it.
 */
export function overflowReason(dropped: readonly Pick<DroppedCandidate, 'reason'>[], podAttempts: number): string {
  if (podAttempts > 0) return 'pods-failed';
  const counts = new Map<string, number>();
  for (const d of dropped) if (d.reason !== 'model-not-served') counts.set(d.reason, (counts.get(d.reason) ?? 0) + 1);
  let best: string | undefined;
  for (const [reason, n] of counts) if (best === undefined || n > counts.get(best)!) best = reason;
  return best ?? 'no-pod';
}

/** The record as one line (fields without a value are left out). */
export function logLine(record: RequestRecord): string {
  return JSON.stringify({ msg: 'request', ...record });
}
