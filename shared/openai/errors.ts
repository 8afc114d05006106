// Every error leaves through here, in OpenAI's shape: {"error": {message, type, param, code}}.

export interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export interface ErrorOptions {
  type?: string;
  param?: string | null;
  code?: string | null;
  headers?: Record<string, string>;
}

/** The error type OpenAI's API uses for each status we emit. */
export function errorTypeFor(status: number): string {
  if (status === 400 || status === 404 || status === 413) return 'invalid_request_error';
  if (status === 401) return 'authentication_error';
  if (status === 429) return 'rate_limit_error';
  if (status === 502 || status === 504) return 'upstream_error';
  if (status === 503) return 'service_unavailable_error';
  return 'server_error';
}

export function errorBody(status: number, message: string, opts: ErrorOptions = {}): OpenAIErrorBody {
  return {
    error: {
      message,
      type: opts.type ?? errorTypeFor(status),
      param: opts.param ?? null,
      code: opts.code ?? null,
    },
  };
}

/** A complete error response, marked `x-kinference-route: rejected` as docs/api.md promises. */
export function errorResponse(status: number, message: string, opts: ErrorOptions = {}): Response {
  return new Response(JSON.stringify(errorBody(status, message, opts)), {
    status,
    headers: {
      'content-type': 'application/json',
      'x-kinference-route': 'rejected',
      ...opts.headers,
    },
  });
}

/** The SSE frame that ends a failed stream (vLLM's shape), to be followed by `data: [DONE]`. */
export function sseErrorFrame(status: number, message: string, opts: ErrorOptions = {}): string {
  return `data: ${JSON.stringify(errorBody(status, message, opts))}\n\n`;
}

export const SSE_DONE = 'data: [DONE]\n\n';

/** How a failed Responses API stream ends: an `error` event (the Responses stream has no [DONE]). */
export function responsesErrorEvent(message: string, code: string): string {
  return `event: error\ndata: ${JSON.stringify({ type: 'error', code, message, param: null })}\n\n`;
}
