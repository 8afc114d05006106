// The per-request wrapper both the inference and the passthrough routes go through: the request's
// id, its in-flight and outcome metrics, its drain-deadline end for streams, its sampled log line;
// then the answer is written straight to the socket.
import type { ApiResponse } from '../exchange.ts';
import { describeUnexpected } from '../../../shared/describe-error.ts';
import { HOPS_HEADER, hopsOf, MAX_AGENT_HOPS, propagatedHeaders, requestIdFor } from '../../forward/headers.ts';
import { BoundedLabel } from '../observability/metrics.ts';
import { RequestError } from '../bodies/request.ts';
import { logLine, type RequestRecord } from '../observability/evidence.ts';
import { errorAnswer, writeAnswer, type Answer } from './answers.ts';
import type { ClientRequest } from './client-request.ts';
import type { RequestContext, RequestPathDeps } from './path-deps.ts';

type RecorderDeps = Pick<RequestPathDeps, 'metrics' | 'now' | 'rand' | 'log' | 'newRequestId' | 'requestLog'>;

const DRAIN_END = 'the agent is shutting down and its drain deadline passed; the answer is incomplete';

/** A request that has passed through agents too often (or says so in a header we cannot read). */
function loopAnswer(hops: number | undefined): Answer {
  return hops === undefined
    ? errorAnswer(400, `${HOPS_HEADER} must be a small whole number`, { param: HOPS_HEADER, code: 'invalid_header' })
    : errorAnswer(508, `request loop: it has already passed through ${hops} agents`, { code: 'loop_detected' });
}

export class RequestRecorder {
  readonly #deps: RecorderDeps;
  readonly #modelLabel: BoundedLabel;
  readonly #policyLabel: BoundedLabel;
  /** Fired at the drain deadline: streams still running end with an error event and [DONE]. */
  readonly #drainDeadline = new AbortController();
  readonly #drainStop = { signal: this.#drainDeadline.signal, message: DRAIN_END };
  /** A fresh request id made ahead, after the last answer (see #answered). */
  #nextId: string | undefined;

  constructor(deps: RecorderDeps, maxLabelValues: number) {
    this.#deps = deps;
    this.#modelLabel = new BoundedLabel(maxLabelValues);
    this.#policyLabel = new BoundedLabel(maxLabelValues);
  }

  /** After an answer is written: the pod's bookkeeping, the request's count, the next request's id. */
  #answered(api: string, r: RequestRecord, settle: (() => void) | undefined): void {
    settle?.();
    const slash = r.route.indexOf('/'); // local/<pod> → local
    // Label values in the counter's order: api, route, outcome, model, policy.
    this.#deps.metrics.requests.add(
      1,
      api,
      slash < 0 ? r.route : r.route.slice(0, slash),
      r.outcome,
      r.model === undefined ? 'none' : this.#modelLabel.value(r.model),
      r.policy === undefined ? 'none' : this.#policyLabel.value(r.policy),
    );
    // A fresh id costs a few µs when made once per request (cold): made here, the next request
    // that comes without one takes it ready.
    this.#nextId ??= this.#deps.newRequestId();
  }

  readonly #afterStream = (api: string, r: RequestRecord, settle: (() => void) | undefined) =>
    this.#answered(api, r, settle);

  readonly #takeId = (): string => {
    const id = this.#nextId ?? this.#deps.newRequestId();
    this.#nextId = undefined;
    return id;
  };

  /** The drain deadline passed: end every stream still running, properly. */
  endStreams(): void {
    this.#drainDeadline.abort();
  }

  /** Runs `serve` for one request with its id, metrics and (sampled) log line, and writes its answer to `res`. */
  async serve(
    api: string,
    req: ClientRequest,
    res: ApiResponse,
    serve: (ctx: RequestContext) => Promise<Answer>,
  ): Promise<void> {
    const { metrics } = this.#deps;
    const started = this.#deps.now();
    // Formatted only for a sampled log line: an ISO date per request is a measurable share of it.
    const startedAt = Date.now();
    const requestId = requestIdFor(req.headers.get('x-request-id'), this.#takeId);
    const hops = hopsOf(req.headers);
    const upstreamHeaders = propagatedHeaders(req.headers, requestId, api);
    upstreamHeaders[HOPS_HEADER] = String((hops ?? 0) + 1);
    const ctx: RequestContext = {
      started,
      upstreamHeaders,
      record: {
        time: '',
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
    let answer: Answer;
    try {
      answer = hops === undefined || hops > MAX_AGENT_HOPS ? loopAnswer(hops) : await serve(ctx);
    } catch (error) {
      if (error instanceof RequestError) {
        answer = errorAnswer(error.status, error.message, { param: error.param, code: error.code });
      } else if (req.aborted) {
        answer = errorAnswer(499, 'client closed the request', { code: 'client_closed' });
      } else {
        this.#deps.log('error', `unexpected error on the request path: ${describeUnexpected(error)}`);
        answer = errorAnswer(500, 'internal error in the agent', { type: 'server_error' });
      }
    } finally {
      metrics.inFlight.dec();
    }
    const r = ctx.record;
    r.route = answer.headers['x-kinference-route'] ?? 'rejected';
    r.status = answer.status;
    // A client that left before its answer is its own outcome, not the status we could not send.
    const ok = answer.status >= 200 && answer.status < 300;
    r.outcome = req.aborted || answer.status === 499 ? 'cancelled' : ok ? 'ok' : String(answer.status);
    answer.headers['x-request-id'] = requestId;
    const writing = writeAnswer(res, answer, this.#drainStop);
    // What the answer does not wait for runs once it is out: a whole answer was handed to the
    // socket within the call; a stream's head and first chunk go at the end of this turn, so its
    // part waits for the next (its relay runs the pod's part first if the stream ends sooner).
    if (answer.stream) setImmediate(this.#afterStream, api, r, answer.settle);
    else this.#answered(api, r, answer.settle);
    const sent = await writing;
    const { requestLog } = this.#deps;
    if (requestLog.sample <= 0 || this.#deps.rand() >= requestLog.sample) return;
    if (!sent.ok && r.outcome === 'ok') r.outcome = 'broken';
    r.time = new Date(startedAt).toISOString();
    r.durationMs = Math.round(this.#deps.now() - started);
    requestLog.write(logLine(r));
  }
}
