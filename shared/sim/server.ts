// The simulator's HTTP face: vLLM's OpenAI-compatible routes over a SimEngine in real time.
//
// node:http rather than hono: tests need a pod that fails at the socket level (reset before the
// headers, or mid-stream), and streams must go out as real chunked writes, token by token.

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { BUCKETS, type Flavor } from './buckets.ts';
import { realClock } from './clock.ts';
import { RealtimeDriver } from './driver.ts';
import { SimEngine, type SeqHandle, type SimEngineOptions, type SubmitResult } from './engine.ts';
import { metricsContentType, renderMetrics } from './metrics.ts';
import { answerNameFilter, type NameFilter } from './name-filter.ts';
import { mulberry32, randomHex } from './random.ts';
import {
  parseEmbedding,
  parseGeneration,
  parseJson,
  type EmbeddingSpec,
  type GenerationSpec,
  type ModelRules,
  type RequestError,
} from './requests.ts';
import { embeddingFor, tokenTexts } from './text.ts';
import { POOLING_PATHS, poolingForm, poolingJson, type PoolingResult, type PoolingRoute } from './pooling.ts';
import {
  chatChunk,
  chatCompletion,
  completionChunk,
  embeddingsResponse,
  modelList,
  responseMessage,
  responseObject,
  responsesUsage,
  sse,
  SSE_DONE,
  sseEvent,
  textCompletion,
  usage,
  usageChunk,
  vllmError,
  type Envelope,
} from './wire.ts';

/** Ways to make the next inference requests fail; `times` limits it to that many (default: until cleared). */
export type SimFault =
  /** Close the connection before any response byte. */
  | { kind: 'refuse-before-headers'; times?: number }
  /** Accept and never answer, until the client or the server gives up. */
  | { kind: 'stall-before-headers'; times?: number }
  /** Stream: send the 200 headers, then reset before any token. Non-stream: like refuse-before-headers. */
  | { kind: 'reset-after-headers'; times?: number }
  /** Stream: send the first token, then reset the connection. Non-stream: reset at the first token. */
  | { kind: 'reset-after-first-token'; times?: number }
  /** Answer with this status and a vLLM error body. */
  | { kind: 'status'; status: number; message?: string; times?: number };

export interface SimOptions extends Omit<SimEngineOptions, 'buckets'> {
  /** 0 (default) = an ephemeral port. */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  /** Which server's /metrics to imitate. Default vllm. */
  engine?: Flavor;
  /**
   * How `/metrics?name[]=…` is answered where prometheus_client reads the query (name-filter.ts):
   * vLLM at `/metrics/` (its exact `/metrics` route is prometheus-fastapi-instrumentator's, which
   * ignores the query) and SGLang at `/metrics` and below. Default `honoured` for vLLM (one API
   * server), `empty` for SGLang (a MultiProcessCollector in a plain registry); TGI ignores queries.
   */
  nameFilter?: NameFilter;
  /** Served model names. Default ['llama-3-8b']. */
  models?: string[];
  /** LoRA adapters served on the first model (vLLM --lora-modules); needs maxLoras > 0. */
  adapters?: string[];
  /** Context window (max_model_len). Default 8,192. */
  maxModelLen?: number;
  /** Embedding dimension. Default 32. */
  embeddingDim?: number;
  /** When set, every response carries `x-sim-pod: <name>`. */
  name?: string;
  /** Like `vllm serve --api-key`: requests without `Authorization: Bearer <key>` get 401. */
  apiKey?: string;
  /** Sees every request's method, path and headers as it arrives (tests check what reached the pod). */
  onRequest?: (seen: { method: string; path: string; query: string; headers: IncomingMessage['headers'] }) => void;
}

export interface SimServer {
  url: string;
  port: number;
  engine: SimEngine;
  flavor: Flavor;
  /** Applies a fault to the next inference requests; undefined clears it. */
  setFault(fault: SimFault | undefined): void;
  /** An unhealthy pod answers /health with 503. */
  setHealthy(healthy: boolean): void;
  close(): Promise<void>;
}

const MAX_BODY_BYTES = 16 * 1024 * 1024;

export async function startSim(opts: SimOptions = {}): Promise<SimServer> {
  const flavor = opts.engine ?? 'vllm';
  const nameFilter: NameFilter = opts.nameFilter ?? (flavor === 'sglang' ? 'empty' : 'honoured');
  /**
   * Who answers a GET under /metrics: `whole` ignores the query (TGI's axum handler; vLLM's exact
   * `/metrics`, registered first by prometheus-fastapi-instrumentator's `expose`), `filtered` is
   * prometheus_client's `make_asgi_app`, mounted at /metrics with the path pattern `^/metrics(.*)$`
   * (vllm/entrypoints/serve/instrumentator/metrics.py, sglang/srt/utils/common.py).
   */
  const metricsRoute = (path: string): 'whole' | 'filtered' | undefined => {
    if (flavor === 'tgi') return path === '/metrics' ? 'whole' : undefined;
    if (!path.startsWith('/metrics')) return undefined;
    return flavor === 'vllm' && path === '/metrics' ? 'whole' : 'filtered';
  };
  const host = opts.host ?? '127.0.0.1';
  const baseModels = opts.models ?? ['llama-3-8b'];
  if (baseModels.length === 0) throw new RangeError('a simulator serves at least one model');
  const adapters = opts.adapters ?? [];
  if (adapters.length > 0 && !opts.maxLoras) throw new RangeError('adapters need maxLoras > 0 (vLLM --max-loras)');
  const rules: ModelRules = { models: [...baseModels, ...adapters], maxModelLen: opts.maxModelLen ?? 8192 };
  const embeddingDim = opts.embeddingDim ?? 32;
  const engine = new SimEngine({ ...opts, buckets: BUCKETS[flavor] }, realClock);
  const driver = new RealtimeDriver(engine, realClock);
  const rand = mulberry32((opts.seed ?? 1) ^ 0x9e3779b9); // ids and texts; apart from the engine's stream
  const startedAt = Date.now() / 1000;
  let fault: SimFault | undefined;
  let healthy = true;

  function takeFault(): SimFault | undefined {
    const current = fault;
    if (current?.times !== undefined) {
      current.times--;
      if (current.times <= 0) fault = undefined;
    }
    return current;
  }

  const envelope = (prefix: string, model: string): Envelope => ({
    id: `${prefix}-${randomHex(rand, 16)}`,
    created: Math.floor(Date.now() / 1000),
    model,
  });

  function generate(spec: GenerationSpec, res: ServerResponse, faultNow: SimFault | undefined): void {
    const env = envelope(spec.kind === 'chat' ? 'chatcmpl' : spec.kind === 'responses' ? 'resp' : 'cmpl', spec.model);
    const messageId = `msg_${randomHex(rand, 16)}`;
    let sequence = 0;
    const event = (type: string, fields: Record<string, unknown>) => sseEvent(type, sequence++, fields);
    const textPart = { item_id: messageId, output_index: 0, content_index: 0 };
    const word = tokenTexts(Math.floor(rand() * 2 ** 32));
    const resetAtFirstToken = faultNow?.kind === 'reset-after-first-token';
    let text = '';
    const result = engine.submit(
      {
        promptTokens: spec.promptTokens,
        tokens: spec.tokens,
        maxTokens: spec.maxTokens,
        capTokens: spec.capTokens,
        ...(adapters.includes(spec.model) ? { adapter: spec.model } : {}),
      },
      {
        onToken: (_at, n) => {
          if (res.destroyed || res.writableEnded) return;
          const piece = word(n - 1);
          if (!spec.stream) {
            text += piece;
            if (n === 1 && resetAtFirstToken) res.socket?.destroy();
            return;
          }
          const finish = seq && n >= seq.targetTokens ? seq.finishReason : null;
          let frames = '';
          if (spec.kind === 'responses') {
            // Like vLLM, the opening events travel with the first token, so the first frame marks TTFT.
            if (n === 1) {
              const opening = responseObject(env, messageId, 'in_progress', undefined, null);
              frames += event('response.created', { response: opening });
              frames += event('response.in_progress', { response: opening });
              frames += event('response.output_item.added', {
                output_index: 0,
                item: responseMessage(messageId, '', 'in_progress'),
              });
              frames += event('response.content_part.added', {
                ...textPart,
                part: { type: 'output_text', text: '', annotations: [] },
              });
            }
            text += piece;
            frames += event('response.output_text.delta', { ...textPart, delta: piece, logprobs: [] });
          } else if (spec.kind === 'chat') {
            if (n === 1) frames += sse(chatChunk(env, { role: 'assistant', content: '' }, null, spec.includeUsage));
            frames += sse(chatChunk(env, { content: piece }, finish, spec.includeUsage));
          } else {
            frames += sse(completionChunk(env, piece, finish, spec.includeUsage));
          }
          // The reset waits for the frames to reach the socket: destroy() would drop them unsent.
          if (n === 1 && resetAtFirstToken) res.write(frames, () => res.socket?.destroy());
          else res.write(frames);
        },
        onDone: (_at, outcome) => {
          if (outcome.finishReason === 'abort' || res.destroyed || res.writableEnded) return;
          const u = usage(spec.promptTokens, outcome.outputTokens);
          if (spec.kind === 'responses') {
            const done = responseObject(
              env,
              messageId,
              'completed',
              text,
              responsesUsage(spec.promptTokens, outcome.outputTokens),
            );
            if (!spec.stream) return sendJson(res, 200, done);
            const part = { type: 'output_text', text, annotations: [], logprobs: [] };
            res.end(
              event('response.output_text.done', { ...textPart, text, logprobs: [] }) +
                event('response.content_part.done', { ...textPart, part }) +
                event('response.output_item.done', {
                  output_index: 0,
                  item: responseMessage(messageId, text, 'completed'),
                }) +
                event('response.completed', { response: done }),
            );
          } else if (spec.stream) {
            const object = spec.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
            if (spec.includeUsage) res.write(sse(usageChunk(env, object, u)));
            res.end(SSE_DONE);
          } else if (spec.kind === 'chat') {
            sendJson(res, 200, chatCompletion(env, text, outcome.finishReason, u));
          } else {
            sendJson(res, 200, textCompletion(env, text, outcome.finishReason, u));
          }
        },
      },
    );
    // The callbacks below read `seq`; the engine only calls them after this function returns.
    const seq = admitted(result, res);
    if (!seq) return;
    if (spec.stream) {
      // Like vLLM (Starlette), the headers leave at once; the first data frame is the first token.
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
      res.flushHeaders();
    }
    if (faultNow?.kind === 'reset-after-headers') {
      if (spec.stream)
        res.write('', () => res.socket?.destroy()); // after the headers reach the wire
      else res.socket?.destroy();
    }
  }

  function embed(spec: EmbeddingSpec, res: ServerResponse): void {
    const env = envelope('embd', spec.model);
    const result = engine.submit(
      { promptTokens: spec.promptTokens, kind: 'embed' },
      {
        onDone: (_at, outcome) => {
          if (outcome.finishReason === 'abort' || res.destroyed || res.writableEnded) return;
          const vectors = spec.texts.map((t) => embeddingFor(t, embeddingDim));
          sendJson(res, 200, embeddingsResponse(env, vectors, spec.promptTokens));
        },
      },
    );
    admitted(result, res);
  }

  /** A non-generating route: parse (JSON, or multipart for audio), charge the engine, answer. */
  async function servePooling(
    route: PoolingRoute,
    req: IncomingMessage,
    bytes: Buffer,
    res: ServerResponse,
  ): Promise<void> {
    let result: PoolingResult & { model?: string };
    if (route === 'transcription') {
      const contentType = req.headers['content-type'] ?? '';
      if (!contentType.startsWith('multipart/form-data'))
        return sendError(res, { status: 400, message: 'Expected multipart/form-data.', param: null });
      let form: FormData;
      try {
        form = await new Response(new Uint8Array(bytes), { headers: { 'content-type': contentType } }).formData();
      } catch (err) {
        return sendError(res, {
          status: 400,
          message: `Malformed multipart body: ${(err as Error).message}`,
          param: null,
        });
      }
      result = poolingForm(form);
    } else {
      const body = parseJson(bytes.toString('utf8'));
      if (!body.ok) return sendError(res, body.error);
      result = {
        ...poolingJson(route, body.value, String(body.value.model), rules.maxModelLen),
        model: String(body.value.model),
      };
    }
    if (!result.ok) return sendError(res, result);
    if (!rules.models.includes(result.model ?? ''))
      return sendError(res, { status: 404, message: `The model \`${result.model}\` does not exist.`, param: 'model' });
    const { work } = result;
    const ids = () => ({ id: `${route}-${randomHex(rand, 16)}`, created: Math.floor(Date.now() / 1000) });
    if (work.immediate) return sendJson(res, 200, work.answer(ids()));
    const submitted = engine.submit(
      { promptTokens: work.promptTokens, kind: 'embed' },
      {
        onDone: (_at, outcome) => {
          if (outcome.finishReason === 'abort' || res.destroyed || res.writableEnded) return;
          sendJson(res, 200, work.answer(ids()));
        },
      },
    );
    admitted(submitted, res);
  }

  /** Answers a rejected submit; for an accepted one, aborts the sequence when the client leaves. */
  function admitted(result: SubmitResult, res: ServerResponse): SeqHandle | undefined {
    if (!result.accepted) {
      sendError(res, { status: result.reason === 'queue-full' ? 429 : 400, message: result.message, param: null });
      return undefined;
    }
    const seq = result.seq;
    res.on('close', () => {
      if (!res.writableFinished) seq.abort(); // the client left: free the slot and the KV cache
    });
    return seq;
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (opts.name !== undefined) res.setHeader('x-sim-pod', opts.name);
    const url = new URL(req.url ?? '/', 'http://sim');
    const path = url.pathname;
    const query = url.search.slice(1);
    const inference: Record<string, 'chat' | 'text' | 'responses' | 'embed'> = {
      '/v1/chat/completions': 'chat',
      '/v1/completions': 'text',
      '/v1/responses': 'responses',
      '/v1/embeddings': 'embed',
    };
    const route = inference[path];
    opts.onRequest?.({ method: req.method ?? '', path, query, headers: req.headers });
    // Like `vllm serve --api-key`: every route but the probes and /metrics needs the bearer key.
    if (
      opts.apiKey !== undefined &&
      path !== '/health' &&
      !path.startsWith('/metrics') &&
      req.headers.authorization !== `Bearer ${opts.apiKey}`
    ) {
      return sendJson(res, 401, { error: 'Unauthorized' });
    }
    const pooling = POOLING_PATHS[path];
    if (pooling !== undefined) {
      if (req.method !== 'POST') return sendDetail(res, 405, 'Method Not Allowed');
      const bytes = await readBody(req, MAX_BODY_BYTES);
      if (bytes === undefined) return sendError(res, { status: 413, message: 'Request body too large.', param: null });
      return servePooling(pooling, req, bytes, res);
    }

    if (route !== undefined) {
      if (req.method !== 'POST') return sendDetail(res, 405, 'Method Not Allowed');
      const bytes = await readBody(req, MAX_BODY_BYTES);
      if (bytes === undefined) {
        return sendError(res, { status: 413, message: 'Request body too large.', param: null });
      }
      const text = bytes.toString('utf8');
      const faultNow = takeFault();
      if (faultNow?.kind === 'refuse-before-headers') return void req.socket.destroy();
      if (faultNow?.kind === 'stall-before-headers') return;
      if (faultNow?.kind === 'status') {
        const message = faultNow.message ?? `Simulated failure (${faultNow.status}).`;
        return sendError(res, { status: faultNow.status, message, param: null });
      }
      const body = parseJson(text);
      if (!body.ok) return sendError(res, body.error);
      if (route === 'embed') {
        const spec = parseEmbedding(body.value, rules);
        return spec.ok ? embed(spec.value, res) : sendError(res, spec.error);
      }
      const spec = parseGeneration(route, body.value, rules);
      return spec.ok ? generate(spec.value, res, faultNow) : sendError(res, spec.error);
    }

    if (req.method !== 'GET') return sendDetail(res, path in GET_ROUTES ? 405 : 404, 'Not Found');
    switch (path) {
      case '/health':
        res.writeHead(healthy ? 200 : 503, { 'content-length': '0' }).end();
        return;
      case '/v1/models':
        return sendJson(
          res,
          200,
          modelList(baseModels, Math.floor(startedAt), rules.maxModelLen, { adapters, parent: baseModels[0]! }),
        );
      default: {
        const metrics = metricsRoute(path);
        if (metrics === undefined) return sendDetail(res, 404, 'Not Found');
        const text = renderMetrics(engine.snapshot(), { flavor, modelName: baseModels[0]!, startedAt });
        const body = metrics === 'whole' ? text : answerNameFilter(text, query, nameFilter);
        res.writeHead(200, { 'content-type': metricsContentType(flavor) }).end(body);
        return;
      }
    }
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (res.headersSent) res.destroy();
      else sendError(res, { status: 500, message: String(err), param: null });
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const urlHost = host.includes(':') ? `[${host}]` : host;

  return {
    url: `http://${urlHost}:${port}`,
    port,
    engine,
    flavor,
    setFault(next) {
      fault = next === undefined ? undefined : { ...next };
    },
    setHealthy(next) {
      healthy = next;
    },
    close() {
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections(); // open streams end now; their sequences abort
        driver.stop();
      });
    },
  };
}

const GET_ROUTES: Record<string, true> = { '/health': true, '/v1/models': true, '/metrics': true };

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function sendError(res: ServerResponse, error: RequestError): void {
  sendJson(res, error.status, vllmError(error.status, error.message, error.param));
}

/** FastAPI's own answer for routes and methods it does not know. */
function sendDetail(res: ServerResponse, status: number, detail: string): void {
  sendJson(res, status, { detail: status === 405 ? 'Method Not Allowed' : detail });
}

/** The body's bytes, or undefined when it exceeds `limit` bytes. */
async function readBody(req: IncomingMessage, limit: number): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) return undefined;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}
