// Which request headers may travel to a hosted provider. An allow-list, not a deny-list: a header
// a client, SDK or tracing library adds tomorrow (`baggage`, `x-user-email`) stays on the cluster
// unless it is named here, and every value named here is classified like the body. Pure.

/**
 * The only client-influenced headers sent off the cluster: the request id and the W3C trace
 * context (kept so the provider's logs and the app's traces meet), and a Messages request's
 * `anthropic-beta` feature names (the body's beta fields need them). The agent adds its own
 * `content-type`, `accept` and the provider's credentials; nothing else of the client's leaves.
 */
export const OFF_CLUSTER_HEADERS: readonly string[] = ['x-request-id', 'traceparent', 'tracestate', 'anthropic-beta'];

/** The headers of `headers` allowed off the cluster (names lowercase), for the provider call. */
export function offClusterHeaders(headers: Readonly<Record<string, string>> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (!headers) return out;
  for (const name of OFF_CLUSTER_HEADERS) {
    const value = headers[name];
    if (value !== undefined) out[name] = value;
  }
  return out;
}

/** How a header finding's path reads (`header:x-request-id`): never a body path. */
export function headerPath(name: string): string {
  return `header:${name}`;
}
