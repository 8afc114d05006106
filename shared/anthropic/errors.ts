// Errors in the Anthropic Messages API's shape, `{"type":"error","error":{"type","message"}}`: what
// a client of POST /v1/messages reads, whether the agent, a pod or an overflow provider failed.

/** The error type Anthropic's API uses for each status. */
const TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  503: 'overloaded_error',
  529: 'overloaded_error',
};

const KNOWN_TYPES = new Set([...Object.values(TYPES), 'api_error', 'timeout_error', 'billing_error']);

export function anthropicErrorType(status: number): string {
  return TYPES[status] ?? (status >= 500 ? 'api_error' : 'invalid_request_error');
}

export function anthropicErrorJson(status: number, message: string, type?: string): string {
  const t = type !== undefined && KNOWN_TYPES.has(type) ? type : anthropicErrorType(status);
  return JSON.stringify({ type: 'error', error: { type: t, message } });
}

/** The event that ends a broken Messages stream, as Anthropic's streams send one. */
export function anthropicErrorEvent(message: string, type = 'api_error'): string {
  return `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type, message } })}\n\n`;
}

/** The message of an error body in either shape (OpenAI's `error.message`, Anthropic's too), if any. */
export function errorMessageOf(text: string): { message?: string; type?: string } {
  try {
    const parsed = JSON.parse(text) as { error?: { message?: unknown; type?: unknown } };
    const e = parsed?.error;
    return {
      ...(typeof e?.message === 'string' ? { message: e.message } : {}),
      ...(typeof e?.type === 'string' ? { type: e.type } : {}),
    };
  } catch {
    return {};
  }
}

/**
 * A provider adapter's error Response (OpenAI-shaped, as the adapters make them) in Anthropic's
 * shape, status and headers kept; a success, or a body already Anthropic-shaped, passes as is.
 */
export async function asAnthropicError(response: Response): Promise<Response> {
  if (response.status < 400) return response;
  const text = await response.text();
  let shaped = text;
  try {
    if ((JSON.parse(text) as { type?: unknown })?.type !== 'error') {
      const { message, type } = errorMessageOf(text);
      shaped = anthropicErrorJson(response.status, message ?? `request failed (HTTP ${response.status})`, type);
    }
  } catch {
    shaped = anthropicErrorJson(response.status, text.trim().slice(0, 200) || `HTTP ${response.status}`);
  }
  const headers = new Headers(response.headers);
  headers.set('content-type', 'application/json');
  headers.delete('content-length');
  return new Response(shaped, { status: response.status, headers });
}
