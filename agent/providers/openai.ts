// Any provider that speaks OpenAI's protocol: OpenAI, Azure OpenAI, Databricks serving endpoints,
// Bedrock's OpenAI-compatible endpoint, another vLLM. The body goes out as the client sent it
// with `model` swapped for the provider's id; the answer comes back byte for byte.
//
// The response's `model` field is NOT rewritten back to the client's name: it names what actually
// served the request (as OpenAI's own dated model ids do), and leaving it lets the stream relay
// stay a byte copy. The Bedrock adapter follows the same rule (it reports the Bedrock model id).
import { resolveSecret } from '../config/secrets.ts';
import { API_PATHS, type RequestKind } from '../types.ts';
import { errorResponse, SSE_DONE, sseErrorFrame } from '../../shared/openai/errors.ts';
import type { ProviderCall, ProviderSettings } from './types.ts';
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
} from './upstream.ts';

const DEFAULT_OPENAI_ENDPOINT = 'https://api.openai.com/v1';

/** The URL one call goes to. Pure. */
export function openAIUrl(settings: ProviderSettings, kind: RequestKind, providerModel: string): URL {
  const base = (settings.endpoint ?? DEFAULT_OPENAI_ENDPOINT).replace(/\/+$/, '');
  if (settings.azureApiVersion !== undefined) {
    // Azure serves the Responses API beside the deployments, the deployment named in `model`.
    const url =
      kind === 'responses'
        ? new URL(`${base}/openai/responses`)
        : new URL(`${base}/openai/deployments/${encodeURIComponent(providerModel)}/${API_PATHS[kind]}`);
    url.searchParams.set('api-version', settings.azureApiVersion);
    return url;
  }
  return new URL(`${base}/${API_PATHS[kind]}`);
}

/** Authentication headers: Azure's `api-key`, or a bearer token. Pure (the key is passed in). */
export function authHeaders(settings: ProviderSettings, key: string | undefined): Record<string, string> {
  if (key === undefined) return {};
  return settings.azureApiVersion !== undefined ? { 'api-key': key } : { authorization: `Bearer ${key}` };
}

/**
 * An upstream error as an OpenAI error Response with the same status. OpenAI-shaped bodies keep
 * their message/type/param/code; anything else is wrapped. Credential rejections never echo the
 * upstream message (providers quote key fragments in it). Pure.
 */
export function upstreamErrorResponse(
  provider: string,
  status: number,
  text: string,
  opts: { secrets?: readonly string[]; retryAfter?: string } = {},
): Response {
  const headers: Record<string, string> = opts.retryAfter ? { 'retry-after': opts.retryAfter } : {};
  const parsed = parseJson(text);
  const err = parsed && typeof parsed === 'object' ? (parsed as { error?: unknown }).error : undefined;
  let message: string;
  let type: string | undefined;
  let param: string | null = null;
  let code: string | null = null;
  if (err && typeof err === 'object' && typeof (err as { message?: unknown }).message === 'string') {
    const e = err as { message: string; type?: unknown; param?: unknown; code?: unknown };
    message = e.message;
    type = typeof e.type === 'string' ? e.type : undefined;
    param = typeof e.param === 'string' ? e.param : null;
    code = e.code === undefined || e.code === null ? null : String(e.code);
  } else if (parsed && typeof parsed === 'object' && typeof (parsed as { message?: unknown }).message === 'string') {
    // Databricks: {"error_code": "...", "message": "..."}
    const p = parsed as { message: string; error_code?: unknown };
    message = p.message;
    code = typeof p.error_code === 'string' ? p.error_code : null;
  } else if (typeof err === 'string') {
    message = err;
  } else {
    const snippet = text.trim().slice(0, 200);
    message = `provider ${provider} returned HTTP ${status}${snippet ? `: ${snippet}` : ''}`;
  }
  if (status === 401 || status === 403) {
    message = `provider ${provider} rejected the configured credentials (HTTP ${status})`;
  }
  return errorResponse(status, redact(message, opts.secrets ?? []), { type, param, code, headers });
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * Relays an SSE body event by event: bytes go out as soon as an event is complete (so a token is
 * never held back), and a partial event is held until its blank line arrives. That way, when the
 * upstream breaks mid-event, the partial event is dropped and the client sees a clean error event
 * and `data: [DONE]` instead of half a JSON object. Linear: each chunk is scanned once (plus the
 * three bytes before it, where a blank line may start), and a partial event larger than
 * `maxEventBytes` ends the stream instead of growing without bound.
 */
export function relaySse(
  upstream: AsyncIterable<Uint8Array>,
  opts: {
    onCancel: () => void;
    describeBreak: (err: unknown) => string;
    maxEventBytes?: number;
    /** How a broken stream ends (default: OpenAI's error event and `data: [DONE]`). */
    brokenEnd?: (message: string) => string;
    /** What marks a complete stream (default `data: [DONE]`): a break after it adds nothing. */
    endMarker?: string;
  },
): ReadableStream<Uint8Array> {
  const it = upstream[Symbol.asyncIterator]();
  const encoder = new TextEncoder();
  const maxEventBytes = opts.maxEventBytes ?? Infinity;
  const endMarker = opts.endMarker ?? 'data: [DONE]';
  const brokenEnd =
    opts.brokenEnd ?? ((message: string) => sseErrorFrame(502, message, { code: 'upstream_stream_error' }) + SSE_DONE);
  /** The partial event so far, as received. */
  let held: Uint8Array[] = [];
  let heldBytes = 0;
  /** The last (up to) three held bytes: a blank line can straddle two chunks. */
  let heldEnd: Uint8Array = new Uint8Array(0);
  let sawDone = false;
  let finished = false;
  const fail = (controller: ReadableStreamDefaultController<Uint8Array>, message: string) => {
    finished = true;
    if (!sawDone) controller.enqueue(encoder.encode(brokenEnd(message)));
    controller.close();
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      // Loop until something is enqueued: the stream only calls pull again after an enqueue.
      while (!finished) {
        let next: IteratorResult<Uint8Array>;
        try {
          next = await it.next();
        } catch (err) {
          fail(controller, opts.describeBreak(err));
          return;
        }
        if (next.done) {
          finished = true;
          if (heldBytes > 0) controller.enqueue(Buffer.concat(held, heldBytes));
          controller.close();
          return;
        }
        const chunk = next.value;
        const probe = heldEnd.byteLength === 0 ? chunk : Buffer.concat([heldEnd, chunk]);
        const cutInProbe = lastEventEnd(probe);
        if (cutInProbe === 0) {
          held.push(chunk);
          heldBytes += chunk.byteLength;
          heldEnd = probe.subarray(Math.max(0, probe.byteLength - 3));
          if (heldBytes > maxEventBytes) {
            opts.onCancel();
            fail(controller, `upstream event larger than ${maxEventBytes} bytes`);
            return;
          }
          continue;
        }
        // A blank line ending inside heldEnd would have been cut on an earlier chunk.
        const cut = cutInProbe - heldEnd.byteLength;
        const events = Buffer.concat([...held, chunk.subarray(0, cut)], heldBytes + cut);
        const rest = chunk.subarray(cut);
        held = rest.byteLength > 0 ? [rest] : [];
        heldBytes = rest.byteLength;
        heldEnd = rest.subarray(Math.max(0, rest.byteLength - 3));
        if (!sawDone && events.includes(endMarker)) sawDone = true;
        controller.enqueue(events);
        return;
      }
    },
    cancel() {
      finished = true;
      opts.onCancel();
    },
  });
}

/** Index just past the last blank line ("\n\n", "\r\n\r\n" or a mix) in bytes, or 0. */
export function lastEventEnd(bytes: Uint8Array): number {
  for (let i = bytes.byteLength - 1; i >= 1; i--) {
    if (bytes[i] !== 0x0a) continue;
    if (bytes[i - 1] === 0x0a) return i + 1;
    if (bytes[i - 1] === 0x0d && i >= 2 && bytes[i - 2] === 0x0a) return i + 1;
  }
  return 0;
}

export function createOpenAIProvider(settings: ProviderSettings, deps: ProviderDeps = {}): ClosableProvider {
  const limits = providerLimits(deps);
  const { dispatcher, close } = providerDispatcher(deps, settings.timeoutMs, limits.idleTimeoutMs);
  const models = Object.keys(settings.models);
  const name = settings.name;

  async function send(call: ProviderCall): Promise<Response> {
    const providerModel = settings.models[call.model];
    if (providerModel === undefined) {
      return errorResponse(404, `model ${call.model} is not offered by provider ${name}`, {
        code: 'model_not_found',
        param: 'model',
      });
    }
    let key: string | undefined;
    try {
      key = settings.apiKey ? resolveSecret(settings.apiKey, deps.env) : undefined;
    } catch (err) {
      throw new ProviderError(name, 'config', (err as Error).message);
    }
    const secrets = key ? [key] : [];
    const wantsStream = call.kind !== 'embeddings' && call.body.stream === true;
    const res = await postUpstream({
      provider: name,
      url: openAIUrl(settings, call.kind, providerModel),
      headers: {
        'content-type': 'application/json',
        accept: wantsStream ? 'text/event-stream' : 'application/json',
        ...call.headers,
        ...authHeaders(settings, key),
      },
      body: JSON.stringify({ ...call.body, model: providerModel }),
      signal: call.signal,
      timeoutMs: settings.timeoutMs,
      dispatcher,
    });
    res.settle();
    const passHeaders: Record<string, string> = {};
    const requestId = header(res.headers, 'x-request-id');
    if (requestId) passHeaders['x-request-id'] = requestId;

    const readCtx = () => ({
      timedOut: res.timedOut(),
      aborted: call.signal.aborted,
      timeoutMs: settings.timeoutMs,
      idleTimeoutMs: limits.idleTimeoutMs,
    });
    if (res.status < 200 || res.status >= 300) {
      let text: string;
      try {
        text = await readText(res.body);
      } catch (err) {
        throw failure(name, err, readCtx());
      }
      return upstreamErrorResponse(name, res.status, text, { secrets, retryAfter: header(res.headers, 'retry-after') });
    }

    const contentType = header(res.headers, 'content-type') ?? '';
    if (wantsStream && contentType.startsWith('text/event-stream')) {
      const body = relaySse(res.body, {
        maxEventBytes: limits.maxBodyBytes,
        onCancel: () => res.body.destroy(),
        describeBreak: (err) =>
          call.signal.aborted ? `provider ${name}: request aborted` : `provider ${name}: stream broke${codeOf(err)}`,
      });
      return new Response(body, { status: res.status, headers: { ...SSE_HEADERS, ...passHeaders } });
    }

    // A complete JSON document: read it whole so a malformed answer becomes a 502 the chain
    // can fail over on, rather than garbage handed to the client.
    let text: string;
    try {
      text = await readBounded(res.body, limits.maxBodyBytes, name);
    } catch (err) {
      throw failure(name, err, readCtx());
    }
    if (parseJson(text) === undefined) {
      return errorResponse(502, `provider ${name} returned a malformed response`, { code: 'upstream_malformed' });
    }
    return new Response(text, { status: res.status, headers: { ...JSON_HEADERS, ...passHeaders } });
  }

  return {
    name,
    kind: 'openai',
    models,
    // An Anthropic Messages body is not an OpenAI one, and translating it to chat would drop what
    // chat cannot say (thinking blocks, cache marks, tool_result errors): refused, with the way out.
    supports: (kind: RequestKind, model: string) => kind !== 'messages' && Object.hasOwn(settings.models, model),
    refusal: (kind: RequestKind) =>
      kind === 'messages'
        ? `provider ${name} (openai) does not take Anthropic Messages requests: give a provider of kind anthropic (Anthropic, or any server that serves /v1/messages, such as vLLM) or bedrock`
        : undefined,
    send,
    close,
  };
}

function codeOf(err: unknown): string {
  const code = err && typeof err === 'object' ? (err as { code?: unknown }).code : undefined;
  return typeof code === 'string' ? ` (${code})` : '';
}
