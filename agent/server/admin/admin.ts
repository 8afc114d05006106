// The admin listener: probes, Prometheus metrics, state, explain, dashboard. Never on the
// request path, so it stays answerable when the API listener is saturated. Routes and error
// handling on Hono, served by node:http through @hono/node-server's request listener; the API
// hot path stays on node:http directly (../listener/listener.ts).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Hono } from 'hono';
import { getRequestListener, type HttpBindings } from '@hono/node-server';
import { errorBody, type ErrorOptions } from '../../../shared/openai/errors.ts';
import type { Metrics } from '../observability/metrics.ts';
import type { Explanation } from './explain.ts';
import { DASHBOARD_HTML } from './dashboard.ts';
import { readBoundedBody, RequestError } from '../bodies/request.ts';
import { nodeRequest } from '../exchange.ts';
import { describeUnexpected } from '../../../shared/describe-error.ts';
import { propagatedHeaders, requestIdFor } from '../../forward/headers.ts';
import type { RequestKind } from '../../types.ts';

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

/** An OpenAI-shaped error answer (the same shape as the API listener's). */
function failure(status: number, message: string, opts: ErrorOptions = {}): Response {
  return new Response(JSON.stringify(errorBody(status, message, opts)), {
    status,
    headers: { 'content-type': 'application/json', 'x-kinference-route': 'rejected', ...opts.headers },
  });
}

export type AdminHandler = (req: IncomingMessage, res: ServerResponse) => void;

/** The admin routes as a Hono app on node:http's bindings (the body of POST /explain is read from the socket). */
export function createAdminApp(deps: AdminDeps): Hono<{ Bindings: HttpBindings }> {
  const app = new Hono<{ Bindings: HttpBindings }>();
  app.get('/healthz', (c) => c.text('ok'));
  app.get('/readyz', (c) => {
    const readiness = deps.readiness();
    return c.json(readiness, readiness.ready ? 200 : 503);
  });
  app.get('/metrics', async (c) => {
    const body = await deps.metrics.registry.metrics();
    return c.body(body, 200, { 'content-type': deps.metrics.registry.contentType });
  });
  app.get('/debug/state', async (c) => {
    const peers = c.req.query('peers');
    if (peers !== undefined && !/^\d{1,6}$/.test(peers))
      return failure(400, "'peers' must be a whole number of peers' pods to list", {
        param: 'peers',
        code: 'invalid_value',
      });
    return c.json((await deps.state(peers === undefined ? undefined : Number(peers))) as object);
  });
  app.get('/explain', (c) => {
    const model = c.req.query('model');
    if (!model) return failure(400, "query parameter 'model' is required", { param: 'model' });
    if (!deps.isKnownModel(model))
      return failure(404, `The model \`${model}\` does not exist.`, { param: 'model', code: 'model_not_found' });
    const promptTokensText = c.req.query('promptTokens') ?? '256';
    const promptTokens = Number(promptTokensText);
    if (!Number.isInteger(promptTokens) || promptTokens < 1) {
      return failure(400, `'promptTokens' must be a positive integer, found "${promptTokensText}"`, {
        param: 'promptTokens',
      });
    }
    const tags = (c.req.query('tags') ?? '')
      .split(',')
      .map((t) => t.trim().toLowerCase())
      .filter(Boolean);
    return c.json(
      deps.explain({ model, tenant: c.req.query('tenant'), namespace: c.req.query('namespace'), tags, promptTokens }),
    );
  });
  // The request as the API listener would see it: which detectors fired on which JSON path (never
  // the matched text), what could not be read, who the caller is, and the decision.
  app.post('/explain', async (c) => {
    const kind = (c.req.query('api') ?? 'chat') as RequestKind;
    if (!KINDS.includes(kind)) return failure(400, `'api' must be one of ${KINDS.join(', ')}`, { param: 'api' });
    const incoming = nodeRequest(c.env.incoming);
    const headers = incoming.headers;
    try {
      const body = await readBoundedBody({ headers, incoming }, deps.maxBodyBytes);
      return c.json(
        deps.explainBody({
          kind,
          body,
          tags: headers.get('x-kinference-tags'),
          namespace: c.req.query('namespace'),
          tenant: c.req.query('tenant'),
          ip: c.req.query('ip'),
          forwardedHeaders: propagatedHeaders(
            headers,
            requestIdFor(headers.get('x-request-id'), () => 'explain'),
            kind,
          ),
        }),
      );
    } catch (error) {
      if (error instanceof RequestError)
        return failure(error.status, error.message, { param: error.param, code: error.code });
      throw error;
    }
  });
  app.get('/ui', (c) => c.html(DASHBOARD_HTML));
  app.notFound((c) => failure(404, `no route ${c.req.method} ${c.req.path}`));
  app.onError((error) => {
    deps.log('error', `unhandled error in the admin listener: ${describeUnexpected(error)}`);
    return failure(500, 'internal error in the agent');
  });
  return app;
}

/**
 * The admin listener's node:http request handler. `hostname` is the listener's own address, the
 * origin of a request that has no Host (HTTP/1.0).
 */
export function createAdminHandler(deps: AdminDeps, hostname: string): AdminHandler {
  const app = createAdminApp(deps);
  const listener = getRequestListener(app.fetch, { hostname });
  return (req, res) => void listener(req, res);
}
