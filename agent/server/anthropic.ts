// The Anthropic Messages API's error shape, for answers to POST /v1/messages: the agent's own
// OpenAI-shaped errors become `{"type":"error","error":{"type","message"}}` with the type Anthropic
// uses for the status. Answers from pods (already Anthropic-shaped) pass unchanged.
import type { Answer } from './answers.ts';

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

/** An error event ending a broken stream, as Anthropic streams send one. */
export function anthropicErrorEvent(message: string): string {
  return `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'api_error', message } })}\n\n`;
}

/** The answer, with an agent error (x-kinference-route: rejected) in Anthropic's shape. */
export function anthropicShaped(answer: Answer): Answer {
  if (answer.headers['x-kinference-route'] !== 'rejected' || answer.body === undefined) return answer;
  let message = 'request failed';
  try {
    const text = typeof answer.body === 'string' ? answer.body : new TextDecoder().decode(answer.body);
    message = (JSON.parse(text) as { error?: { message?: string } }).error?.message ?? message;
  } catch {
    // keep the generic message
  }
  const type = TYPES[answer.status] ?? (answer.status >= 500 ? 'api_error' : 'invalid_request_error');
  return { ...answer, body: JSON.stringify({ type: 'error', error: { type, message } }) };
}
