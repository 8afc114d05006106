// A provider that speaks Anthropic's Messages API (kind `anthropic`): Anthropic itself, or any
// server that serves POST /v1/messages (vLLM, SGLang, a gateway). Messages requests only: the body
// goes out as the client sent it with `model` swapped for the provider's id, `x-api-key` and
// `anthropic-version` set; the answer comes back as it came, a stream event by event. Errors are
// Anthropic-shaped, credential rejections never echo the upstream message, and a stream that
// breaks ends with Anthropic's `event: error`.
import { resolveSecret } from '../config/secrets.ts';
import type { RequestKind } from '../types.ts';
import { anthropicErrorEvent, anthropicErrorJson, errorMessageOf } from '../../shared/anthropic/errors.ts';
import type { ProviderCall, ProviderSettings } from './types.ts';
import { relaySse } from './openai.ts';
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

const DEFAULT_ANTHROPIC_ENDPOINT = 'https://api.anthropic.com';
/** The API version Anthropic's SDKs send; `anthropicVersion` in the provider's settings overrides it. */
export const DEFAULT_ANTHROPIC_VERSION = '2023-06-01';

/** `{endpoint}/v1/messages`: the endpoint is the base URL an Anthropic SDK takes. Pure. */
export function messagesUrl(settings: ProviderSettings): URL {
  return new URL(`${(settings.endpoint ?? DEFAULT_ANTHROPIC_ENDPOINT).replace(/\/+$/, '')}/v1/messages`);
}

/** Why this provider cannot take a request of this kind. */
export function anthropicRefusal(name: string, kind: RequestKind): string | undefined {
  return kind === 'messages' ? undefined : `provider ${name} (anthropic) serves Anthropic Messages (/v1/messages) only`;
}

/** An Anthropic error Response with `status`; credential rejections say only that. Pure. */
export function anthropicUpstreamError(
  provider: string,
  status: number,
  text: string,
  opts: { secrets?: readonly string[]; retryAfter?: string } = {},
): Response {
  const { message, type } = errorMessageOf(text);
  const said =
    status === 401 || status === 403
      ? `provider ${provider} rejected the configured credentials (HTTP ${status})`
      : (message ?? `provider ${provider} returned HTTP ${status}`);
  return new Response(anthropicErrorJson(status, redact(said, opts.secrets ?? []), type), {
    status,
    headers: { ...JSON_HEADERS, ...(opts.retryAfter ? { 'retry-after': opts.retryAfter } : {}) },
  });
}

function errorOf(status: number, message: string): Response {
  return new Response(anthropicErrorJson(status, message), { status, headers: JSON_HEADERS });
}

export function createAnthropicProvider(settings: ProviderSettings, deps: ProviderDeps = {}): ClosableProvider {
  const limits = providerLimits(deps);
  const { dispatcher, close } = providerDispatcher(deps, settings.timeoutMs, limits.idleTimeoutMs);
  const name = settings.name;
  const url = messagesUrl(settings);

  async function send(call: ProviderCall): Promise<Response> {
    const providerModel = settings.models[call.model];
    if (providerModel === undefined) return errorOf(404, `model ${call.model} is not offered by provider ${name}`);
    const refusal = anthropicRefusal(name, call.kind);
    if (refusal) return errorOf(400, refusal);
    let key: string | undefined;
    try {
      key = settings.apiKey ? resolveSecret(settings.apiKey, deps.env) : undefined;
    } catch (err) {
      throw new ProviderError(name, 'config', (err as Error).message);
    }
    const secrets = key ? [key] : [];
    const stream = call.body.stream === true;
    const res = await postUpstream({
      provider: name,
      url,
      headers: {
        'content-type': 'application/json',
        accept: stream ? 'text/event-stream' : 'application/json',
        ...call.headers,
        'anthropic-version': settings.anthropicVersion ?? DEFAULT_ANTHROPIC_VERSION,
        ...(key !== undefined ? { 'x-api-key': key } : {}),
      },
      body: JSON.stringify({ ...call.body, model: providerModel }),
      signal: call.signal,
      timeoutMs: settings.timeoutMs,
      dispatcher,
    });
    res.settle();
    const readCtx = () => ({
      timedOut: res.timedOut(),
      aborted: call.signal.aborted,
      timeoutMs: settings.timeoutMs,
      idleTimeoutMs: limits.idleTimeoutMs,
    });
    const passHeaders: Record<string, string> = {};
    const requestId = header(res.headers, 'request-id');
    if (requestId) passHeaders['request-id'] = requestId;
    if (res.status < 200 || res.status >= 300) {
      let text: string;
      try {
        text = await readText(res.body);
      } catch (err) {
        throw failure(name, err, readCtx());
      }
      return anthropicUpstreamError(name, res.status, text, {
        secrets,
        retryAfter: header(res.headers, 'retry-after'),
      });
    }
    if (stream && (header(res.headers, 'content-type') ?? '').startsWith('text/event-stream')) {
      const body = relaySse(res.body, {
        maxEventBytes: limits.maxBodyBytes,
        onCancel: () => res.body.destroy(),
        describeBreak: (err) =>
          call.signal.aborted ? `provider ${name}: request aborted` : `provider ${name}: stream broke${codeOf(err)}`,
        brokenEnd: (message) => anthropicErrorEvent(message),
        endMarker: 'event: message_stop',
      });
      return new Response(body, { status: res.status, headers: { ...SSE_HEADERS, ...passHeaders } });
    }
    // A whole message: read it so a malformed answer is a 502 the chain can fail over on.
    let text: string;
    try {
      text = await readBounded(res.body, limits.maxBodyBytes, name);
    } catch (err) {
      throw failure(name, err, readCtx());
    }
    try {
      JSON.parse(text);
    } catch {
      return errorOf(502, `provider ${name} returned a malformed response`);
    }
    return new Response(text, { status: res.status, headers: { ...JSON_HEADERS, ...passHeaders } });
  }

  return {
    name,
    kind: 'anthropic',
    models: Object.keys(settings.models),
    supports: (kind: RequestKind, model: string) => kind === 'messages' && Object.hasOwn(settings.models, model),
    refusal: (kind: RequestKind) => anthropicRefusal(name, kind),
    send,
    close,
  };
}

function codeOf(err: unknown): string {
  const code = err && typeof err === 'object' ? (err as { code?: unknown }).code : undefined;
  return typeof code === 'string' ? ` (${code})` : '';
}
