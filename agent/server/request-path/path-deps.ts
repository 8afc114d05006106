// What the request path needs from the rest of the agent, and what it carries per request.
import type { SessionAffinity } from './sessions.ts';
import type { RequestTraces } from '../observability/request-trace.ts';
import type { PodClient } from '../../forward/pod-client.ts';
import type { PodTimeouts } from '../../forward/pod.ts';
import type { HeaderReader } from '../../forward/headers.ts';
import type { LeaveVerdict } from '../../route/router.ts';
import type { Candidate } from '../../route/candidate.ts';
import type { EffectivePolicy, RequestKind, RouteRequest } from '../../types.ts';
import type { Metrics } from '../observability/metrics.ts';
import type { ParsedRequest } from '../bodies/request.ts';
import type { Identity } from './identify.ts';
import type { RequestRecord } from '../observability/evidence.ts';
import type { Limits } from '../../config/limits.ts';
import type { Classification } from '../../classify/classify.ts';
import type { BodyVerdict } from '../bodies/body-work.ts';
import type { OverflowResult } from '../../providers/overflow.ts';

/** One request's context along the path: its id, what goes upstream with it, and its record. */
export interface RequestContext {
  record: RequestRecord;
  /** x-request-id and the client's trace context, for pods and providers. */
  upstreamHeaders: Record<string, string>;
  started: number;
  /** How the last pod tried failed before its first byte (safe to show: codes, statuses). */
  lastPodError?: string;
}

/** What the request path needs from the rest of the agent. */
export interface RequestPathDeps {
  metrics: Metrics;
  /** OpenTelemetry spans for each request (agent/server/observability/tracing.ts); absent: none, and OpenTelemetry is never loaded. */
  traces?: RequestTraces;
  /** Session affinity (agent/server/request-path/sessions.ts); absent: off. */
  sessions?: SessionAffinity;
  dispatcher: PodClient;
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
  identify(req: { headers: HeaderReader }, remoteIp: string | undefined): Identity;
  /** Tags of the body and of the header values a provider would receive (`forwardedHeaders`). */
  classify(
    headerTags: string | null,
    body: Record<string, unknown>,
    forwardedHeaders: Record<string, string>,
  ): string[];
  /**
   * Large bodies judged on worker threads (../bodies/body-offload.ts): `takes` says whether a body of this
   * size goes to a worker at all (so small bodies skip the promise), `judge` gives the verdict,
   * or undefined when the body is the path's to parse and classify itself; `counted` counts a
   * worker's classification, with the forwarded header values classified here, as `classify`
   * counts its own.
   */
  bodies?: {
    takes(byteLength: number): boolean;
    judge(kind: RequestKind, bytes: Uint8Array, headerTags: string | null): Promise<BodyVerdict | undefined>;
    counted(c: Classification, forwardedHeaders: Record<string, string>): string[];
    close(): Promise<void>;
  };
  isKnownModel(model: string): boolean;
  /** The prompt's token ids by the model's own tokenizer, where one is configured (precise prefix routing). */
  promptTokenIds?(model: string, body: Record<string, unknown>): number[] | undefined;
  policyFor(identity: Identity, model: string): EffectivePolicy;
  leaveVerdict(policy: EffectivePolicy, request: RouteRequest): LeaveVerdict;
  pool: {
    /**
     * The candidates for a request for `model` (local pods serving it, its peer shortlist), with
     * each local pod's expected cached tokens of `promptBlocks`.
     */
    candidates(
      model: string,
      promptBlocks?: readonly number[],
      tokens?: { ids: readonly number[]; lora?: string },
    ): Candidate[];
    /** Bookkeeping for one request sent to a pod; returns hooks for its first byte and end. */
    begin(
      c: Candidate,
      promptTokens: number,
      kind: RequestKind,
      stream: boolean,
      promptBlocks?: readonly number[],
      /** The requested model: a LoRA adapter of the pod's takes a slot there. */
      model?: string,
    ): { firstByte(ms: number): void; answered(ms: number): void; end(ok: boolean): void };
    /** The pod failed before its first byte: unreachable (ejected until a probe) or answered an error (a moment out). */
    markFailed(c: Candidate, how?: 'unreachable' | 'answered'): void;
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
