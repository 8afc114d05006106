// The admin listener: probes, Prometheus metrics, state, explain, dashboard. Never on the
// request path, so it stays answerable when the API listener is saturated.
import { Hono } from 'hono';
import { errorResponse } from '../../shared/openai/errors.ts';
import type { Metrics } from './metrics.ts';
import type { Explanation } from './explain.ts';
import { DASHBOARD_HTML } from './dashboard.ts';

export interface Readiness {
  ready: boolean;
  checks: Record<string, { ok: boolean; detail?: string }>;
}

export interface AdminDeps {
  metrics: Metrics;
  readiness(): Readiness;
  state(): Promise<unknown>;
  explain(query: { model: string; tenant?: string; namespace?: string; tags: string[]; promptTokens: number }): Explanation;
  isKnownModel(model: string): boolean;
}

export function createAdminApp(deps: AdminDeps): Hono {
  const app = new Hono();
  app.get('/healthz', (c) => c.text('ok'));
  app.get('/readyz', (c) => {
    const readiness = deps.readiness();
    return c.json(readiness, readiness.ready ? 200 : 503);
  });
  app.get('/metrics', async (c) => {
    const body = await deps.metrics.registry.metrics();
    return c.body(body, 200, { 'content-type': deps.metrics.registry.contentType });
  });
  app.get('/debug/state', async (c) => c.json((await deps.state()) as object));
  app.get('/explain', (c) => {
    const model = c.req.query('model');
    if (!model) return errorResponse(400, "query parameter 'model' is required", { param: 'model' });
    if (!deps.isKnownModel(model)) return errorResponse(404, `The model \`${model}\` does not exist.`, { param: 'model', code: 'model_not_found' });
    const promptTokensText = c.req.query('promptTokens') ?? '256';
    const promptTokens = Number(promptTokensText);
    if (!Number.isInteger(promptTokens) || promptTokens < 1) {
      return errorResponse(400, `'promptTokens' must be a positive integer, found "${promptTokensText}"`, { param: 'promptTokens' });
    }
    const tags = (c.req.query('tags') ?? '').split(',').map((t) => t.trim().toLowerCase()).filter(Boolean);
    return c.json(deps.explain({ model, tenant: c.req.query('tenant'), namespace: c.req.query('namespace'), tags, promptTokens }));
  });
  app.get('/ui', (c) => c.html(DASHBOARD_HTML));
  app.notFound((c) => errorResponse(404, `no route ${c.req.method} ${c.req.path}`));
  app.onError((error) => {
    console.error('kinference: unhandled error in the admin listener', error);
    return errorResponse(500, 'internal error in the agent');
  });
  return app;
}
