// The per-request wrapper both the inference and the passthrough routes go through: the request's
// id, its in-flight and outcome metrics, its drain-deadline end for streams, its sampled log line.
import { errorResponse } from '../../shared/openai/errors.ts';
import { describeUnexpected } from '../../shared/describe-error.ts';
import { endOnSignal } from '../forward/relay.ts';
import { propagatedHeaders, requestIdFor } from '../forward/headers.ts';
import { BoundedLabel } from './metrics.ts';
import { RequestError } from './request.ts';
import { logLine, onBodyEnd } from './evidence.ts';
import type { RequestContext, RequestPathDeps } from './path-deps.ts';

type RecorderDeps = Pick<RequestPathDeps, 'metrics' | 'now' | 'rand' | 'log' | 'newRequestId' | 'requestLog'>;

export class RequestRecorder {
  readonly #deps: RecorderDeps;
  readonly #modelLabel: BoundedLabel;
  readonly #policyLabel: BoundedLabel;
  /** Fired at the drain deadline: streams still running end with an error event and [DONE]. */
  readonly #drainDeadline = new AbortController();

  constructor(deps: RecorderDeps, maxLabelValues: number) {
    this.#deps = deps;
    this.#modelLabel = new BoundedLabel(maxLabelValues);
    this.#policyLabel = new BoundedLabel(maxLabelValues);
  }

  /** The drain deadline passed: end every stream still running, properly. */
  endStreams(): void {
    this.#drainDeadline.abort();
  }

  /** Runs `serve` for one request with its id, metrics and (sampled) log line. */
  async serve(api: string, req: Request, serve: (ctx: RequestContext) => Promise<Response>): Promise<Response> {
    const { metrics } = this.#deps;
    const started = this.#deps.now();
    const requestId = requestIdFor(req.headers.get('x-request-id'), this.#deps.newRequestId);
    const ctx: RequestContext = {
      started,
      upstreamHeaders: propagatedHeaders(req.headers, requestId),
      record: {
        time: new Date().toISOString(),
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
    let response: Response;
    try {
      response = await serve(ctx);
    } catch (error) {
      if (error instanceof RequestError) {
        response = errorResponse(error.status, error.message, { param: error.param, code: error.code });
      } else if (req.signal.aborted) {
        response = errorResponse(499, 'client closed the request', { code: 'client_closed' });
      } else {
        this.#deps.log('error', `unexpected error on the request path: ${describeUnexpected(error)}`);
        response = errorResponse(500, 'internal error in the agent', { type: 'server_error' });
      }
    } finally {
      metrics.inFlight.dec();
    }
    const r = ctx.record;
    r.route = response.headers.get('x-kinference-route') ?? 'rejected';
    r.status = response.status;
    // A client that left before its answer is its own outcome, not the status we could not send.
    r.outcome =
      req.signal.aborted || response.status === 499 ? 'cancelled' : response.ok ? 'ok' : String(response.status);
    metrics.requests.inc({
      api,
      route: r.route.split('/')[0],
      outcome: r.outcome,
      model: r.model === undefined ? 'none' : this.#modelLabel.value(r.model),
      policy: r.policy === undefined ? 'none' : this.#policyLabel.value(r.policy),
    });
    response.headers.set('x-request-id', requestId);
    // Content type first: reading `.body` of a whole (bytes) answer would turn @hono/node-server's
    // light Response into a web one, whose body is then copied and read back through a web stream.
    if (response.headers.get('content-type')?.includes('event-stream') && response.body) {
      const body = endOnSignal(
        response.body,
        this.#drainDeadline.signal,
        'the agent is shutting down and its drain deadline passed; the answer is incomplete',
      );
      response = new Response(body, { status: response.status, headers: response.headers });
    }
    const { requestLog } = this.#deps;
    if (requestLog.sample <= 0 || this.#deps.rand() >= requestLog.sample) return response;
    return onBodyEnd(response, (ok) => {
      if (!ok && r.outcome === 'ok') r.outcome = 'broken';
      r.durationMs = Math.round(this.#deps.now() - started);
      requestLog.write(logLine(r));
    });
  }
}
