// Answers the request path gives of its own: headers added to an upstream answer, and refusals.
import { errorResponse } from '../../shared/openai/errors.ts';
import type { EffectivePolicy } from '../types.ts';

export function withHeaders(response: Response, headers: Record<string, string>): Response {
  const merged = new Headers(response.headers);
  for (const [k, v] of Object.entries(headers)) merged.set(k, v);
  return new Response(response.body, { status: response.status, headers: merged });
}

/** 502 after every pod tried failed before its first byte; says how the last one failed. */
export function podsFailed(attempts: number, lastError?: string): Response {
  const last = lastError ? `; last: ${lastError}` : '';
  return errorResponse(
    502,
    `the model server failed before answering (tried ${attempts} pod${attempts > 1 ? 's' : ''}${last})`,
    { code: 'upstream_failed' },
  );
}

export function retryAfterSeconds(policy: EffectivePolicy): string {
  return String(Math.max(1, Math.ceil(policy.waitMaxMs / 1000)));
}
