// The OpenAI-compatible listener, on node:http directly: a route table from method and path to a
// handler, each handing the node request and response to the request path, which reads the body
// from the socket stream and writes its answer straight to the socket (no web Request/Response).
import type { ApiRequest, ApiResponse } from '../exchange.ts';
import { randomUUID } from 'node:crypto';
import { describeUnexpected } from '../../../shared/describe-error.ts';
import type { RequestPath } from '../request-path/inference.ts';
import { handlePassthrough, PASSTHROUGH_PATHS } from '../request-path/passthrough.ts';
import { errorAnswer, jsonAnswer, writeAnswer, type Answer } from '../request-path/answers.ts';
import { requestIdFor } from '../../forward/headers.ts';
import { API_PATHS, type RequestKind } from '../../types.ts';

export interface ApiDeps {
  requestPath: RequestPath;
  /** The union of models served by known pods and providers. */
  models(): string[];
  /** A LoRA adapter's base model, as the pods' own model lists say (listed as `parent`, as vLLM does). */
  parentOf?(model: string): string | undefined;
  /** False while draining: new requests get 503 so clients retry elsewhere. */
  accepting(): boolean;
  log(level: 'error', message: string): void;
}

type Route = (req: ApiRequest, res: ApiResponse) => Promise<void> | void;

export type ApiHandler = (req: ApiRequest, res: ApiResponse) => void;

export function createApiHandler(deps: ApiDeps): ApiHandler {
  const { requestPath } = deps;
  const routes = new Map<string, Route>();
  for (const [kind, path] of Object.entries(API_PATHS) as [RequestKind, string][])
    routes.set(`POST /v1/${path}`, (req, res) => requestPath.handle(kind, req, res));
  for (const path of PASSTHROUGH_PATHS) {
    const api = path.replace(/^\/v\d\//, '/').slice(1); // the metric's api label: rerank, audio/speech, …
    routes.set(`POST ${path}`, (req, res) => handlePassthrough(requestPath, api, req, res));
  }
  const models: Route = (req, res) => {
    const created = Math.floor(Date.now() / 1000);
    const data = deps.models().map((id) => {
      const parent = deps.parentOf?.(id);
      return { id, object: 'model', created, owned_by: 'kinference', ...(parent ? { parent } : {}) };
    });
    own(req, res, jsonAnswer(200, { object: 'list', data }, { 'x-kinference-route': 'local/agent' }));
  };
  routes.set('GET /v1/models', models);
  routes.set('HEAD /v1/models', models);

  // Answers of the listener's own (model list, unknown routes, draining) carry the client's
  // request id or a fresh one; the request path sets the one it sent upstream on its answers.
  const own = (req: ApiRequest, res: ApiResponse, answer: Answer) => {
    answer.headers['x-request-id'] = requestIdFor(req.headers.get('x-request-id'), randomUUID);
    void writeAnswer(res, answer);
  };
  const failed = (req: ApiRequest, res: ApiResponse, error: unknown) => {
    deps.log('error', `unhandled error in the API listener: ${describeUnexpected(error)}`);
    if (res.headersSent) res.destroy();
    else own(req, res, errorAnswer(500, 'internal error in the agent', { type: 'server_error' }));
  };

  return (req, res) => {
    if (!deps.accepting())
      return own(
        req,
        res,
        errorAnswer(503, 'this agent is shutting down', {
          code: 'draining',
          headers: { 'retry-after': '1', connection: 'close' },
        }),
      );
    const url = req.url ?? '/';
    const query = url.indexOf('?');
    const path = query < 0 ? url : url.slice(0, query);
    const route = routes.get(`${req.method} ${path}`);
    if (!route) return own(req, res, errorAnswer(404, `no route ${req.method} ${path}`, { code: 'unknown_route' }));
    try {
      const running = route(req, res);
      if (running) running.catch((error: unknown) => failed(req, res, error));
    } catch (error) {
      failed(req, res, error);
    }
  };
}
