// The OpenAI-compatible listener. Thin: each route hands the raw Request to the request path.
import { Hono } from 'hono';
import { getConnInfo } from '@hono/node-server/conninfo';
import { errorResponse } from '../../shared/openai/errors.ts';
import { describeUnexpected } from '../../shared/describe-error.ts';
import type { RequestPath } from './inference.ts';
import { handlePassthrough, PASSTHROUGH_PATHS } from './passthrough.ts';
import { requestIdFor } from '../forward/headers.ts';
import { randomUUID } from 'node:crypto';
import { API_PATHS, type RequestKind } from '../types.ts';

export interface ApiDeps {
  requestPath: RequestPath;
  /** The union of models served by known pods and providers. */
  models(): string[];
  /** False while draining: new requests get 503 so clients retry elsewhere. */
  accepting(): boolean;
  log(level: 'error', message: string): void;
}

export function createApiApp(deps: ApiDeps): Hono {
  const app = new Hono();
  const remoteIp = (c: Parameters<typeof getConnInfo>[0]) => {
    try {
      return getConnInfo(c).remote.address;
    } catch {
      return undefined;
    }
  };
  // Every answer carries a request id: the request path sets the one it sent upstream; the rest
  // (model list, unknown routes, draining) get the client's or a fresh one here.
  app.use('*', async (c, next) => {
    await next();
    if (!c.res.headers.has('x-request-id'))
      c.res.headers.set('x-request-id', requestIdFor(c.req.header('x-request-id') ?? null, randomUUID));
  });
  app.use('*', async (c, next) => {
    if (!deps.accepting())
      return errorResponse(503, 'this agent is shutting down', {
        code: 'draining',
        headers: { 'retry-after': '1', connection: 'close' },
      });
    await next();
  });
  for (const [kind, path] of Object.entries(API_PATHS) as [RequestKind, string][]) {
    app.post(`/v1/${path}`, (c) => deps.requestPath.handle(kind, c.req.raw, remoteIp(c)));
  }
  for (const path of PASSTHROUGH_PATHS) {
    const api = path.replace(/^\/v\d\//, '/').slice(1); // the metric's api label: rerank, audio/speech, …
    app.post(path, (c) => handlePassthrough(deps.requestPath, api, c.req.raw, remoteIp(c)));
  }
  app.get('/v1/models', (c) => {
    const created = Math.floor(Date.now() / 1000);
    const data = deps.models().map((id) => ({ id, object: 'model', created, owned_by: 'kinference' }));
    return c.json({ object: 'list', data }, 200, { 'x-kinference-route': 'local/agent' });
  });
  app.notFound((c) => errorResponse(404, `no route ${c.req.method} ${c.req.path}`, { code: 'unknown_route' }));
  app.onError((error) => {
    deps.log('error', `unhandled error in the API listener: ${describeUnexpected(error)}`);
    return errorResponse(500, 'internal error in the agent', { type: 'server_error' });
  });
  return app;
}
