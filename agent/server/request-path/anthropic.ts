// The Anthropic Messages API's error shape, for answers to POST /v1/messages: the agent's own
// OpenAI-shaped errors become `{"type":"error","error":{"type","message"}}` with the type Anthropic
// uses for the status. Answers from pods and providers (already Anthropic-shaped) pass unchanged.
import { anthropicErrorJson, errorMessageOf } from '../../../shared/anthropic/errors.ts';
import type { Answer } from './answers.ts';

export { anthropicErrorEvent } from '../../../shared/anthropic/errors.ts';

/** The answer, with an agent error (x-kinference-route: rejected) in Anthropic's shape. */
export function anthropicShaped(answer: Answer): Answer {
  if (answer.headers['x-kinference-route'] !== 'rejected' || answer.body === undefined) return answer;
  const text = typeof answer.body === 'string' ? answer.body : new TextDecoder().decode(answer.body);
  const message = errorMessageOf(text).message ?? 'request failed';
  return { ...answer, body: anthropicErrorJson(answer.status, message) };
}
