// What the agent adds to an upstream request besides the body, decided from the client's headers
// and the configuration. Pure: the id generator comes in.
import type { Pod } from '../types.ts';

/** Reading a header by (lowercase) name: the API listener's request, or a web `Headers`. */
export interface HeaderReader {
  get(name: string): string | null;
}

/** A client's id is kept when it is short and plain (it lands in logs and other systems' headers). */
const REQUEST_ID = /^[A-Za-z0-9._:@/+=-]{1,128}$/;
/** W3C Trace Context: version-traceid-parentid-flags, lowercase hex; all-zero ids are invalid. */
const TRACEPARENT = /^[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$/;
/** tracestate: at most 32 list members, 512 characters is what vendors are required to keep. */
const TRACESTATE_MAX = 512;

/** The client's `x-request-id` when usable, else a fresh one. */
export function requestIdFor(clientValue: string | null, generate: () => string): string {
  return clientValue !== null && REQUEST_ID.test(clientValue) ? clientValue : generate();
}

/** anthropic-beta: comma-separated feature names (e.g. `prompt-caching-2024-07-31`). */
const ANTHROPIC_BETA = /^[A-Za-z0-9._-]+(?:\s*,\s*[A-Za-z0-9._-]+)*$/;
const ANTHROPIC_BETA_MAX = 512;

/**
 * Headers sent to pods and providers for one request: the request id, and the client's W3C trace
 * context unchanged (the agent records no spans of its own, so the app's span stays the parent).
 * A malformed traceparent is dropped, as the spec asks, and tracestate with it. A request on the
 * Messages API (`api`) keeps its `anthropic-beta` features: without them an Anthropic upstream
 * refuses or ignores the beta fields its body uses.
 */
export function propagatedHeaders(client: HeaderReader, requestId: string, api?: string): Record<string, string> {
  const out: Record<string, string> = { 'x-request-id': requestId };
  const traceparent = client.get('traceparent')?.trim().toLowerCase();
  if (traceparent && TRACEPARENT.test(traceparent) && !traceparent.startsWith('ff')) {
    out.traceparent = traceparent;
    const tracestate = client.get('tracestate');
    if (tracestate && tracestate.length <= TRACESTATE_MAX) out.tracestate = tracestate;
  }
  if (api === 'messages') {
    const beta = client.get('anthropic-beta')?.trim();
    if (beta && beta.length <= ANTHROPIC_BETA_MAX && ANTHROPIC_BETA.test(beta)) out['anthropic-beta'] = beta;
  }
  return out;
}

/**
 * How many agents a request has passed through, as each agent tells the next upstream. A request
 * that comes back to an agent (a gossiped "pod" at another agent's API address) is caught by it.
 */
export const HOPS_HEADER = 'x-kinference-hops';

/**
 * A request that already passed through an agent may be forwarded once more (to the pod the
 * first agent picked, through at most one agent in between); more than that is a loop.
 */
export const MAX_AGENT_HOPS = 1;

/** The hop count a request arrived with: 0 from a client, undefined when not a small whole number. */
export function hopsOf(client: HeaderReader): number | undefined {
  const value = client.get(HOPS_HEADER);
  if (value === null) return 0;
  return /^[0-9]{1,3}$/.test(value.trim()) ? Number(value.trim()) : undefined;
}

export interface CredentialRule<Secret> {
  namespace?: string;
  /** NAME or NAMESPACE/NAME. */
  pod?: string;
  apiKey: Secret;
}

/** The most specific rule for a pod: one naming the pod, then its namespace, then a catch-all. */
export function credentialFor<Secret>(
  pod: Pick<Pod, 'name' | 'namespace'>,
  rules: readonly CredentialRule<Secret>[],
): Secret | undefined {
  let best: { rank: number; key: Secret } | undefined;
  for (const rule of rules) {
    if (rule.namespace !== undefined && rule.namespace !== pod.namespace) continue;
    if (rule.pod !== undefined && rule.pod !== pod.name && rule.pod !== `${pod.namespace}/${pod.name}`) continue;
    const rank = rule.pod !== undefined ? 2 : rule.namespace !== undefined ? 1 : 0;
    if (!best || rank > best.rank) best = { rank, key: rule.apiKey };
  }
  return best?.key;
}
