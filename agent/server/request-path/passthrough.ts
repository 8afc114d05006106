// Model-server routes the agent does not predict for (rerank, score, tokenize, audio, moderations):
// the client's bytes, multipart included, go to the least-loaded pod serving the model, with the
// agent's own pod credentials and the request's id and trace context, through the same pod send
// as inference (pod-send.ts: failures mark the pod, answers capped at limits.maxUpstreamBodyBytes).
// They never leave the cluster: providers are not asked, so no policy decides anything here
// beyond who is calling.
import type { ApiRequest, ApiResponse } from '../exchange.ts';
import { candidateName } from '../../route/router.ts';
import { leastLoaded } from '../../route/least-loaded.ts';
import { readBoundedBody, RequestError } from '../bodies/request.ts';
import type { RequestContext, RequestPath } from './inference.ts';
import { errorAnswer, podsFailed, type Answer } from './answers.ts';
import { sendToOnePod } from './pod-send.ts';
import { ClientRequest } from './client-request.ts';

/** Paths passed through as they are, as vLLM (and SGLang) serve them. */
export const PASSTHROUGH_PATHS = [
  '/v1/rerank',
  '/v2/rerank',
  '/rerank',
  '/v1/score',
  '/score',
  '/tokenize',
  '/detokenize',
  '/v1/moderations',
  '/v1/audio/transcriptions',
  '/v1/audio/translations',
  '/v1/audio/speech',
] as const;

/** The `model` a passthrough body names: a JSON field, or a multipart form field. */
export async function modelOf(contentType: string, body: Uint8Array): Promise<string> {
  let model: unknown;
  if (contentType.startsWith('multipart/form-data')) {
    let form: FormData;
    try {
      form = await new Response(body as BodyInit, { headers: { 'content-type': contentType } }).formData();
    } catch {
      throw new RequestError(400, 'request body is not valid multipart/form-data', null, 'invalid_multipart');
    }
    model = form.get('model');
  } else {
    let parsed: unknown;
    try {
      parsed = JSON.parse(Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8'));
    } catch (error) {
      throw new RequestError(400, `request body is not valid JSON: ${(error as Error).message}`, null, 'invalid_json');
    }
    model =
      parsed && typeof parsed === 'object' && !Array.isArray(parsed)
        ? (parsed as { model?: unknown }).model
        : undefined;
  }
  if (typeof model !== 'string' || model.length === 0)
    throw new RequestError(400, "'model' is required and must be a non-empty string", 'model', 'invalid_type');
  return model;
}

export function handlePassthrough(
  path: RequestPath,
  api: string,
  incoming: ApiRequest,
  res: ApiResponse,
): Promise<void> {
  const req = new ClientRequest(incoming, res);
  return path.serve(api, req, res, (ctx) => passthrough(path, req, ctx));
}

async function passthrough(path: RequestPath, req: ClientRequest, ctx: RequestContext): Promise<Answer> {
  const deps = path.deps;
  const contentType = req.headers.get('content-type') ?? 'application/json';
  const body = await readBoundedBody(req, deps.limits.maxBodyBytes);
  const model = await modelOf(contentType, body);
  if (!deps.isKnownModel(model))
    throw new RequestError(404, `The model \`${model}\` does not exist.`, 'model', 'model_not_found');
  const identity = deps.identify(req, req.remoteIp);
  Object.assign(ctx.record, { model, tenant: identity.tenant, namespace: identity.namespace });
  // A request with no usable pod waits for one as long as its policy lets a request that may not
  // leave wait: these never leave. (A pod is briefly unusable between two late scrapes.)
  const waitMaxMs = deps.policyFor(identity, model).waitMaxMs;
  const upstreamPath = req.path;
  const tried = new Set<string>();
  for (let attempt = 0; ; attempt++) {
    let candidate = leastLoaded(
      deps.pool.candidates(model).filter((c) => !tried.has(c.pod.uid)),
      model,
      deps.rand,
    );
    while (!candidate && attempt === 0 && deps.now() - ctx.started < waitMaxMs) {
      const woke = await path.waitInLine(
        { tenant: identity.tenant, priority: 'standard', maxMs: waitMaxMs - (deps.now() - ctx.started) },
        () => leastLoaded(deps.pool.candidates(model), model, deps.rand) !== undefined,
        req.signal,
        ctx.record,
      );
      if (woke !== 'turn') break;
      candidate = leastLoaded(deps.pool.candidates(model), model, deps.rand);
    }
    if (!candidate) {
      if (attempt > 0) return podsFailed(attempt, ctx.lastPodError);
      return errorAnswer(
        503,
        `no pod serving model ${model} became available for ${upstreamPath} within ${waitMaxMs}ms (these requests never leave the cluster)`,
        { code: 'no_capacity', headers: { 'retry-after': '1' } },
      );
    }
    ctx.record.podAttempts = attempt + 1;
    const send = {
      path: upstreamPath,
      body,
      headers: { ...ctx.upstreamHeaders, ...deps.podAuth(candidate.pod), 'content-type': contentType },
      wholeAnswer: true,
      answerHeaders: { 'x-kinference-route': candidateName(candidate) },
    };
    const answer = await sendToOnePod(deps, candidate, send, req, ctx, {
      // Counted as in flight (load for the next decision); nothing is predicted, so nothing is learned.
      begin: () => deps.pool.begin(candidate, 0, 'chat', false),
      streamed: (sent) => (ctx.record.stream = sent.contentType.includes('event-stream')),
    });
    if (answer) return answer;
    if (req.aborted) throw new Error('client gone');
    if (attempt >= deps.limits.maxRetries) return podsFailed(attempt + 1, ctx.lastPodError);
    deps.metrics.retries.inc();
    tried.add(candidate.pod.uid);
  }
}
