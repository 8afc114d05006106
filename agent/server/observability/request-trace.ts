// What the request path records of one request for tracing, and the no-op trace it uses when no
// tracer is configured. Kept apart from tracing.ts, which loads OpenTelemetry, so an agent
// without tracing never loads it.
import type { Attributes } from '@opentelemetry/api';
import type { Decision } from '../../route/router.ts';
import type { Candidate } from '../../route/candidate.ts';

/** One child span in flight; `headers` carries its context to the upstream it stands for. */
export interface ChildSpan {
  readonly headers: Record<string, string>;
  end(outcome: { ok: boolean; status?: number; attributes?: Attributes; error?: string }): void;
}

export interface RequestTrace {
  /** A decision made: its action, the chosen pod, and every candidate's prediction (or drop reason). */
  decided(decision: Decision): void;
  /** A wait for a pod begins; call the result with how it ended. */
  waiting(maxMs: number): (outcome: string) => void;
  attempt(candidate: Candidate, predictedMs: number): ChildSpan;
  overflow(providers: readonly string[]): ChildSpan;
  /** The answer (or the error) is ready: status and route, then the request span ends. */
  end(status: number, route: string | undefined, error?: string): void;
}

const NO_CHILD: ChildSpan = { headers: {}, end() {} };
export const NO_TRACE: RequestTrace = {
  decided() {},
  waiting: () => () => {},
  attempt: () => NO_CHILD,
  overflow: () => NO_CHILD,
  end() {},
};

/** Starts the trace of one request from its headers (the caller's `traceparent`). */
export type RequestTraces = (
  headers: { get(name: string): string | null | undefined },
  api: string,
  model: string,
) => RequestTrace;
