// Amazon Bedrock through Converse / ConverseStream: the I/O half. Translation lives in
// bedrock-converse.ts (request/response) and bedrock-stream.ts (event stream → SSE).
//
// Chat, and Anthropic Messages (messages-converse.ts, messages-stream.ts: answered in Anthropic's
// shape, errors too). Not `/completions`: it wants a raw-text continuation, and Converse always
// applies the model's chat template, so serving it here would quietly change what the client asked
// for; `supports()` says no and the chain moves on. Embeddings are a different Bedrock API.
import { randomUUID } from 'node:crypto';
import { resolveSecret } from '../config/secrets.ts';
import type { RequestKind } from '../types.ts';
import { errorResponse } from '../../shared/openai/errors.ts';
import { asAnthropicError } from '../../shared/anthropic/errors.ts';
import { messageOfConverse, messagesToConverse } from './messages-converse.ts';
import { MessagesStreamTranslator } from './messages-stream.ts';
import type { ProviderCall, ProviderSettings } from './types.ts';
import {
  bedrockErrorCode,
  bedrockErrorStatus,
  fromConverseResponse,
  toConverseRequest,
  TranslationError,
  type ConverseRequest,
  type ConverseResponse,
} from './bedrock-converse.ts';
import type { StreamEvent } from './bedrock-stream.ts';
import {
  type ClosableProvider,
  type ProviderDeps,
  failure,
  header,
  JSON_HEADERS,
  postUpstream,
  ProviderError,
  providerDispatcher,
  providerLimits,
  readBounded,
  readText,
  redact,
  SSE_HEADERS,
  type UpstreamResponse,
} from './upstream.ts';

/**
 * The AWS pieces: the SigV4 signer and the binary event-stream codec (bedrock-stream.ts). They
 * load when a Bedrock provider is created, not with the agent: ~3 MB of resident memory (module
 * code and sources) that an agent without Bedrock never needs.
 */
async function importAwsPieces() {
  const [{ SignatureV4 }, { Sha256 }, stream] = await Promise.all([
    import('@smithy/signature-v4'),
    import('@aws-crypto/sha256-js'),
    import('./bedrock-stream.ts'),
  ]);
  return { SignatureV4, Sha256, ...stream };
}
type AwsPieces = Awaited<ReturnType<typeof importAwsPieces>>;
let awsPieces: Promise<AwsPieces> | undefined;
const loadAwsPieces = () => (awsPieces ??= importAwsPieces());

export interface BedrockDeps extends ProviderDeps {
  /** Clock (ms) for `created` and SigV4 dates. */
  now?: () => number;
}

/** Region from settings, else from a standard endpoint host. */
export function bedrockRegion(settings: ProviderSettings): string | undefined {
  if (settings.region) return settings.region;
  const host = settings.endpoint ? new URL(settings.endpoint).hostname : '';
  return /^bedrock-runtime(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com$/.exec(host)?.[1];
}

/** `{endpoint}/model/{modelId}/converse[-stream]`; model ids contain `:`, so the segment is encoded. */
export function converseUrl(endpoint: string, modelId: string, stream: boolean): URL {
  const base = endpoint.replace(/\/+$/, '');
  return new URL(`${base}/model/${encodeURIComponent(modelId)}/${stream ? 'converse-stream' : 'converse'}`);
}

/** Why a Bedrock provider cannot take a request of this kind (it is never sent). */
export function bedrockRefusal(name: string, kind: RequestKind): string {
  const why: Record<RequestKind, string> = {
    chat: '',
    completions: 'Converse always applies a chat template, which would change a raw completion',
    embeddings: 'embeddings are a different Bedrock API',
    responses: 'Bedrock has no Responses API for these models (Converse is chat only)',
    messages: '',
  };
  return `provider ${name} (bedrock) serves chat completions and Anthropic Messages only: ${why[kind]}`;
}

/** What one Bedrock provider's calls share: its settings, where it sends, and how. */
interface Bedrock {
  name: string;
  settings: ProviderSettings;
  region: string | undefined;
  endpoint: string;
  limits: ReturnType<typeof providerLimits>;
  dispatcher: ReturnType<typeof providerDispatcher>['dispatcher'];
  now: () => number;
  env: BedrockDeps['env'];
  awsLoading: Promise<AwsPieces>;
}

type AnswerMeta = { id: string; created: number; model: string };

/** The kinds Converse serves: OpenAI chat, and Anthropic Messages (Claude's own API). */
const SERVED = (kind: RequestKind) => kind === 'chat' || kind === 'messages';

export function createBedrockProvider(settings: ProviderSettings, deps: BedrockDeps = {}): ClosableProvider {
  const name = settings.name;
  const region = bedrockRegion(settings);
  if (!settings.apiKey && !settings.credentials) {
    throw new Error(`provider ${name}: bedrock needs apiKey or credentials`);
  }
  if (!region && (!settings.endpoint || settings.credentials)) {
    throw new Error(`provider ${name}: bedrock needs a region`);
  }
  const limits = providerLimits(deps);
  const { dispatcher, close } = providerDispatcher(deps, settings.timeoutMs, limits.idleTimeoutMs);
  // Loading starts now, so the first request does not wait for it; a failure surfaces on use.
  const awsLoading = loadAwsPieces();
  awsLoading.catch(() => {});
  const bedrock: Bedrock = {
    name,
    settings,
    region,
    endpoint: settings.endpoint ?? `https://bedrock-runtime.${region}.amazonaws.com`,
    limits,
    dispatcher,
    now: deps.now ?? Date.now,
    env: deps.env,
    awsLoading,
  };
  return {
    name,
    kind: 'bedrock',
    models: Object.keys(settings.models),
    supports: (kind: RequestKind, model: string) => SERVED(kind) && Object.hasOwn(settings.models, model),
    refusal: (kind: RequestKind) => (SERVED(kind) ? undefined : bedrockRefusal(name, kind)),
    // A Messages client reads Anthropic's error shape, whatever failed.
    send: async (call) =>
      call.kind === 'messages' ? asAnthropicError(await send(bedrock, call)) : send(bedrock, call),
    close,
  };
}

/** Auth headers for this request, secrets read now; returns the values to redact too. */
async function authorize(
  { name, settings, region, now, env }: Bedrock,
  { SignatureV4, Sha256 }: AwsPieces,
  url: URL,
  headers: Record<string, string>,
  body: string,
): Promise<{ headers: Record<string, string>; secrets: string[] }> {
  try {
    if (settings.apiKey) {
      const key = resolveSecret(settings.apiKey, env);
      return { headers: { ...headers, authorization: `Bearer ${key}` }, secrets: [key] };
    }
    const c = settings.credentials!;
    const credentials = {
      accessKeyId: resolveSecret(c.accessKeyId, env),
      secretAccessKey: resolveSecret(c.secretAccessKey, env),
      sessionToken: c.sessionToken ? resolveSecret(c.sessionToken, env) : undefined,
    };
    const signer = new SignatureV4({ service: 'bedrock', region: region!, sha256: Sha256, credentials });
    const signed = await signer.sign(
      {
        method: 'POST',
        protocol: url.protocol,
        hostname: url.hostname,
        port: url.port ? Number(url.port) : undefined,
        path: url.pathname,
        query: {},
        headers: { ...headers, host: url.host },
        body,
      },
      { signingDate: new Date(now()) },
    );
    const secrets = [credentials.secretAccessKey, credentials.sessionToken ?? ''];
    return { headers: signed.headers as Record<string, string>, secrets };
  } catch (err) {
    throw new ProviderError(
      name,
      'config',
      err instanceof Error && err.message.startsWith('secret ') ? err.message : 'cannot sign the request',
    );
  }
}

/** What the failure helpers need to say why a call failed (timed out, aborted, idle). */
function failureContext({ settings, limits }: Bedrock, res: UpstreamResponse, call: ProviderCall) {
  return () => ({
    timedOut: res.timedOut(),
    aborted: call.signal.aborted,
    timeoutMs: settings.timeoutMs,
    idleTimeoutMs: limits.idleTimeoutMs,
  });
}

async function send(bedrock: Bedrock, call: ProviderCall): Promise<Response> {
  const { name, settings } = bedrock;
  const modelId = settings.models[call.model];
  if (modelId === undefined) {
    return errorResponse(404, `model ${call.model} is not offered by provider ${name}`, {
      code: 'model_not_found',
      param: 'model',
    });
  }
  if (!SERVED(call.kind)) {
    return errorResponse(400, bedrockRefusal(name, call.kind), { code: 'unsupported_request' });
  }
  let converse: ConverseRequest;
  try {
    converse = call.kind === 'messages' ? messagesToConverse(call.body) : toConverseRequest(call.body);
  } catch (err) {
    if (err instanceof TranslationError) return errorResponse(400, err.message, { param: err.param });
    throw err;
  }
  const stream = call.body.stream === true;
  const url = converseUrl(bedrock.endpoint, modelId, stream);
  const body = JSON.stringify(converse);
  const aws = await bedrock.awsLoading;
  const { headers, secrets } = await authorize(
    bedrock,
    aws,
    url,
    {
      ...call.headers,
      'content-type': 'application/json',
      accept: stream ? 'application/vnd.amazon.eventstream' : 'application/json',
    },
    body,
  );
  const res = await postUpstream({
    provider: name,
    url,
    headers,
    body,
    signal: call.signal,
    timeoutMs: settings.timeoutMs,
    dispatcher: bedrock.dispatcher,
  });
  const meta: AnswerMeta = {
    id: `${call.kind === 'messages' ? 'msg_bdrk_' : 'chatcmpl-'}${header(res.headers, 'x-amzn-requestid') ?? randomUUID()}`,
    created: Math.floor(bedrock.now() / 1000),
    model: modelId,
  };
  if (res.status !== 200) {
    res.settle();
    let text: string;
    try {
      text = await readText(res.body);
    } catch (err) {
      throw failure(name, err, failureContext(bedrock, res, call)());
    }
    return bedrockErrorResponse(name, res.status, header(res.headers, 'x-amzn-errortype'), text, secrets);
  }
  if (!stream) return wholeResponse(bedrock, res, call, meta);
  return streamResponse(bedrock, aws, res, call, meta);
}

/** Converse: the whole answer, translated to an OpenAI chat completion. */
async function wholeResponse(
  bedrock: Bedrock,
  res: UpstreamResponse,
  call: ProviderCall,
  meta: AnswerMeta,
): Promise<Response> {
  const { name } = bedrock;
  res.settle();
  let parsed: ConverseResponse;
  try {
    parsed = JSON.parse(await readBounded(res.body, bedrock.limits.maxBodyBytes, name)) as ConverseResponse;
  } catch (err) {
    if (err instanceof SyntaxError)
      return errorResponse(502, `provider ${name} returned a malformed response`, { code: 'upstream_malformed' });
    throw failure(name, err, failureContext(bedrock, res, call)());
  }
  const answer = call.kind === 'messages' ? messageOfConverse(parsed, meta) : fromConverseResponse(parsed, meta);
  return new Response(JSON.stringify(answer), { status: 200, headers: JSON_HEADERS });
}

/**
 * ConverseStream. The connect/headers deadline runs until the first event: Bedrock's 200 says
 * nothing yet, and an exception arriving first (throttling) is still a failure before the first
 * byte, which the chain can fail over on.
 */
async function streamResponse(
  bedrock: Bedrock,
  aws: AwsPieces,
  res: UpstreamResponse,
  call: ProviderCall,
  meta: AnswerMeta,
): Promise<Response> {
  const { name } = bedrock;
  const it = res.body[Symbol.asyncIterator]() as AsyncIterator<Uint8Array>;
  const decoder = new aws.EventStreamDecoder();
  const queue: StreamEvent[] = [];
  try {
    while (queue.length === 0) {
      const next = await it.next();
      if (next.done) break;
      queue.push(...decoder.push(next.value));
    }
  } catch (err) {
    res.settle();
    res.body.destroy();
    if (err instanceof aws.EventStreamError)
      return errorResponse(502, `provider ${name}: ${err.message}`, { code: 'upstream_stream_error' });
    throw failure(name, err, failureContext(bedrock, res, call)());
  }
  res.settle();
  const first = queue[0];
  if (first === undefined) {
    return errorResponse(502, `provider ${name}: stream ended before any event`, { code: 'upstream_stream_error' });
  }
  if (first.type === 'exception') {
    res.body.destroy();
    return errorResponse(bedrockErrorStatus(first.exceptionType, 500), first.message, {
      code: bedrockErrorCode(first.exceptionType),
    });
  }
  const body = translatedStream(name, aws, { it, decoder, queue, res }, call, meta);
  return new Response(body, { status: 200, headers: SSE_HEADERS });
}

/** The rest of an event stream, decoded and translated to OpenAI SSE chunks as the client reads. */
function translatedStream(
  name: string,
  { EventStreamError, ConverseStreamTranslator }: AwsPieces,
  upstream: {
    it: AsyncIterator<Uint8Array>;
    decoder: InstanceType<AwsPieces['EventStreamDecoder']>;
    queue: StreamEvent[];
    res: UpstreamResponse;
  },
  call: ProviderCall,
  meta: AnswerMeta,
): ReadableStream<Uint8Array> {
  const { it, decoder, queue, res } = upstream;
  const translator =
    call.kind === 'messages'
      ? new MessagesStreamTranslator(meta)
      : new ConverseStreamTranslator({
          ...meta,
          includeUsage: (call.body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true,
        });
  const encoder = new TextEncoder();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      while (true) {
        const frames: string[] = [];
        for (const ev of queue.splice(0)) frames.push(...translator.event(ev));
        if (!translator.done) {
          try {
            const next = await it.next();
            if (next.done) {
              frames.push(
                ...(decoder.pending
                  ? translator.fail(502, `provider ${name}: stream ended inside an event`, 'upstream_stream_error')
                  : translator.end()),
              );
            } else {
              queue.push(...decoder.push(next.value));
            }
          } catch (err) {
            const message =
              err instanceof EventStreamError
                ? `provider ${name}: ${err.message}`
                : call.signal.aborted
                  ? `provider ${name}: request aborted`
                  : `provider ${name}: stream broke`;
            frames.push(...translator.fail(502, message, 'upstream_stream_error'));
          }
        }
        if (frames.length > 0) controller.enqueue(encoder.encode(frames.join('')));
        if (translator.done) {
          controller.close();
          // After metadata only the end of the HTTP body is left: read it so the socket goes
          // back to the pool (a new TLS handshake per stream would cost more than this).
          if (translator.failed) res.body.destroy();
          else void drain(it, () => res.body.destroy());
          return;
        }
        if (frames.length > 0) return;
      }
    },
    cancel() {
      res.body.destroy();
    },
  });
}

/** Reads what is left of a finished stream, giving up (and dropping the socket) past a few KiB. */
async function drain(it: AsyncIterator<Uint8Array>, destroy: () => void): Promise<void> {
  let bytes = 0;
  try {
    while (true) {
      const next = await it.next();
      if (next.done) return;
      bytes += next.value.byteLength;
      if (bytes > 16 * 1024) return destroy();
    }
  } catch {
    destroy();
  }
}

/** Bedrock's `{message}` + `x-amzn-errortype` → an OpenAI error Response. Pure. */
export function bedrockErrorResponse(
  provider: string,
  status: number,
  errorType: string | undefined,
  text: string,
  secrets: readonly string[] = [],
): Response {
  const mapped = bedrockErrorStatus(errorType, status);
  const code = bedrockErrorCode(errorType);
  let message: string;
  if (mapped === 401 || mapped === 403) {
    // AWS quotes the canonical request (session token included) in signature errors: never relay.
    message = `provider ${provider} rejected the configured credentials${code ? ` (${code})` : ''}`;
  } else {
    let parsed: { message?: unknown; Message?: unknown } | undefined;
    try {
      parsed = JSON.parse(text) as typeof parsed;
    } catch {
      parsed = undefined;
    }
    const upstream =
      typeof parsed?.message === 'string'
        ? parsed.message
        : typeof parsed?.Message === 'string'
          ? parsed.Message
          : undefined;
    message = redact(upstream ?? `provider ${provider} returned HTTP ${status}`, secrets);
  }
  return errorResponse(mapped, message, { code });
}
