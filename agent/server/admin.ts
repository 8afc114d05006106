// The admin listener: probes, Prometheus metrics, state, explain, dashboard. Never on the
// request path, so it stays answerable when the API listener is saturated. On node:http directly,
// like the API listener: a web framework and web Request/Response objects cost the idle agent
// ~3.4 MB of heap for a handful of small answers (docs/benchmarks.md, "Memory"). Its answers are the ones it
// gave on Hono, byte for byte: the same headers in the same order and case, HEAD as GET without
// the body, and the same target reading (admin-target.ts).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { errorBody, type ErrorOptions } from '../../shared/openai/errors.ts';
import type { Metrics } from './metrics.ts';
import type { Explanation } from './explain.ts';
import { DASHBOARD_HTML } from './dashboard.ts';
import { readBoundedBody, RequestError } from './request.ts';
import { nodeRequest } from './exchange.ts';
import { readTarget, type AdminTarget } from './admin-target.ts';
import { describeUnexpected } from '../../shared/describe-error.ts';
import { propagatedHeaders, requestIdFor } from '../forward/headers.ts';
import type { RequestKind } from '../types.ts';

/** What POST /explain is asked: the body an app would send, and who sends it. */
export interface ExplainBodyQuery {
  kind: RequestKind;
  body: Uint8Array;
  /** The x-kinference-tags header the app would send. */
  tags: string | null;
  namespace?: string;
  tenant?: string;
  /** Explain as the caller at this source IP (identity as the API listener would establish it). */
  ip?: string;
  /** The request id and trace context the app would send, as the request path would forward them. */
  forwardedHeaders?: Record<string, string>;
}

const KINDS: readonly RequestKind[] = ['chat', 'completions', 'embeddings'];

export interface Readiness {
  ready: boolean;
  checks: Record<string, { ok: boolean; detail?: string }>;
}

export interface AdminDeps {
  metrics: Metrics;
  readiness(): Readiness;
  /** At most `maxPeerPods` peers' pods (the fastest predicted) are listed. */
  state(maxPeerPods?: number): Promise<unknown>;
  explain(query: {
    model: string;
    tenant?: string;
    namespace?: string;
    tags: string[];
    promptTokens: number;
  }): Explanation;
  isKnownModel(model: string): boolean;
  /** Throws RequestError for a body the API listener would refuse. */
  explainBody(query: ExplainBodyQuery): object;
  maxBodyBytes: number;
  log(level: 'error', message: string): void;
}

/** One admin answer: status, headers (in the order and case they are sent), body. */
interface AdminAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

const text = (body: string, type: string, status = 200): AdminAnswer => ({
  status,
  headers: { 'Content-Type': type },
  body,
});
const json = (value: unknown, status = 200) => text(JSON.stringify(value), 'application/json', status);
const failure = (status: number, message: string, opts: ErrorOptions = {}): AdminAnswer => ({
  status,
  headers: { 'content-type': 'application/json', 'x-kinference-route': 'rejected', ...opts.headers },
  body: JSON.stringify(errorBody(status, message, opts)),
});

/** What a route is handed: the request, its target, and the listener's settings. */
interface RouteCall {
  req: IncomingMessage;
  target: AdminTarget;
}
type Route = (call: RouteCall) => AdminAnswer | Promise<AdminAnswer>;

export type AdminHandler = (req: IncomingMessage, res: ServerResponse) => void;

/**
 * The admin listener's request handler. `hostname` is the listener's own address, read as the Host
 * of a request that has none (HTTP/1.0).
 */
export function createAdminHandler(deps: AdminDeps, hostname: string): AdminHandler {
  const get = new Map<string, Route>();
  const post = new Map<string, Route>();
  get.set('/healthz', () => text('ok', 'text/plain; charset=UTF-8'));
  get.set('/readyz', () => {
    const readiness = deps.readiness();
    return json(readiness, readiness.ready ? 200 : 503);
  });
  get.set('/metrics', async () => ({
    status: 200,
    headers: { 'content-type': deps.metrics.registry.contentType },
    body: await deps.metrics.registry.metrics(),
  }));
  get.set('/debug/state', async ({ target }) => {
    const peers = target.query('peers');
    if (peers !== undefined && !/^\d{1,6}$/.test(peers))
      return failure(400, "'peers' must be a whole number of peers' pods to list", {
        param: 'peers',
        code: 'invalid_value',
      });
    return json(await deps.state(peers === undefined ? undefined : Number(peers)));
  });
  get.set('/explain', ({ target }) => {
    const model = target.query('model');
    if (!model) return failure(400, "query parameter 'model' is required", { param: 'model' });
    if (!deps.isKnownModel(model))
      return failure(404, `The model \`${model}\` does not exist.`, { param: 'model', code: 'model_not_found' });
    const promptTokensText = target.query('promptTokens') ?? '256';
    const promptTokens = Number(promptTokensText);
    if (!Number.isInteger(promptTokens) || promptTokens < 1) {
      return failure(400, `'promptTokens' must be a positive integer, found "${promptTokensText}"`, {
        param: 'promptTokens',
      });
    }
    const tags = (target.query('tags') ?? '')
      .split(',')
      .map((t) => t.trim().toLowerCase())
      .filter(Boolean);
    return json(
      deps.explain({
        model,
        tenant: target.query('tenant'),
        namespace: target.query('namespace'),
        tags,
        promptTokens,
      }),
    );
  });
  // The request as the API listener would see it: which detectors fired on which JSON path (never
  // the matched text), what could not be read, who the caller is, and the decision.
  post.set('/explain', async ({ req, target }) => {
    const kind = (target.query('api') ?? 'chat') as RequestKind;
    if (!KINDS.includes(kind)) return failure(400, `'api' must be one of ${KINDS.join(', ')}`, { param: 'api' });
    const incoming = nodeRequest(req);
    const headers = incoming.headers;
    try {
      const body = await readBoundedBody({ headers, incoming }, deps.maxBodyBytes);
      return json(
        deps.explainBody({
          kind,
          body,
          tags: headers.get('x-kinference-tags'),
          namespace: target.query('namespace'),
          tenant: target.query('tenant'),
          ip: target.query('ip'),
          forwardedHeaders: propagatedHeaders(
            headers,
            requestIdFor(headers.get('x-request-id'), () => 'explain'),
          ),
        }),
      );
    } catch (error) {
      if (error instanceof RequestError)
        return failure(error.status, error.message, { param: error.param, code: error.code });
      throw error;
    }
  });
  get.set('/ui', () => text(DASHBOARD_HTML, 'text/html; charset=UTF-8'));

  const answer = async (req: IncomingMessage, target: AdminTarget): Promise<AdminAnswer> => {
    const method = req.method ?? 'GET';
    const route = (method === 'GET' || method === 'HEAD' ? get : method === 'POST' ? post : undefined)?.get(
      target.path,
    );
    if (!route) return failure(404, `no route ${method} ${target.path}`);
    try {
      return await route({ req, target });
    } catch (error) {
      deps.log('error', `unhandled error in the admin listener: ${describeUnexpected(error)}`);
      return failure(500, 'internal error in the agent');
    }
  };

  return (req, res) => {
    const target = readTarget(req.url, req.headers.host, hostname);
    if (!target) {
      res.writeHead(400).end();
      return;
    }
    void answer(req, target).then((a) => send(req, res, a));
  };
}

/**
 * Writes an answer. The length goes after node's own Date and Connection headers where node adds it
 * (HTTP/1.1), and with the answer's headers otherwise (HTTP/1.0); HEAD gets GET's status and
 * headers, lowercased and sorted by name, without a body or a length.
 */
function send(req: IncomingMessage, res: ServerResponse, answer: AdminAnswer): void {
  if (req.method === 'HEAD') {
    const names = Object.keys(answer.headers).sort((a, b) => (a.toLowerCase() < b.toLowerCase() ? -1 : 1));
    const headers: Record<string, string> = {};
    for (const name of names) headers[name.toLowerCase()] = answer.headers[name];
    res.writeHead(answer.status, headers).end();
  } else if (res.useChunkedEncodingByDefault) {
    res.statusCode = answer.status;
    for (const [name, value] of Object.entries(answer.headers)) res.setHeader(name, value);
    res.end(answer.body);
  } else {
    res.writeHead(answer.status, { ...answer.headers, 'Content-Length': String(Buffer.byteLength(answer.body)) });
    res.end(answer.body);
  }
}
