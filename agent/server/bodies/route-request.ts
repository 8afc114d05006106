// The routing input for a parsed request: size estimate, answer cap and prompt blocks.
import { estimatePromptTokens } from '../../predict/tokens.ts';
import { BLOCK_TOKENS, CHARS_PER_TOKEN, promptBlocks, renderPrompt } from '../../prefix/blocks.ts';
import type { RouteRequest } from '../../types.ts';
import type { ParsedRequest } from './request.ts';
import type { Identity } from '../request-path/identify.ts';

/** `prefixMaxBlocks`: prompt blocks hashed per request for the prefix index. */
export function buildRouteRequest(
  parsed: ParsedRequest,
  identity: Identity,
  tags: string[],
  prefixMaxBlocks: number,
): RouteRequest {
  return {
    kind: parsed.kind,
    model: parsed.model,
    tenant: identity.tenant,
    namespace: identity.namespace,
    tags,
    promptTokens: estimatePromptTokens(parsed.kind === 'responses' ? responsesPromptView(parsed.body) : parsed.body),
    stream: parsed.stream,
    ...maxTokensOf(parsed.body),
    // Embeddings are not prefix-cached by the engines; everything else is matched on its rendered prompt.
    ...(parsed.kind === 'embeddings'
      ? {}
      : {
          promptBlocks: promptBlocks(renderPrompt(parsed.body), BLOCK_TOKENS * CHARS_PER_TOKEN, prefixMaxBlocks),
        }),
  };
}

/** The most the answer may take, as the client capped it (the overflow budget reserves it). */
function maxTokensOf(body: Record<string, unknown>): { maxTokens?: number } {
  for (const key of ['max_completion_tokens', 'max_tokens', 'max_output_tokens']) {
    const v = body[key];
    if (typeof v === 'number' && Number.isInteger(v) && v >= 0) return { maxTokens: v };
  }
  return {};
}

/** A Responses body seen as chat messages, for the prompt-size estimate: instructions + input items. */
function responsesPromptView(body: Record<string, unknown>): Record<string, unknown> {
  const instructions = typeof body.instructions === 'string' ? [{ content: body.instructions }] : [];
  if (typeof body.input === 'string') return { messages: [...instructions, { content: body.input }] };
  const items = Array.isArray(body.input) ? (body.input as unknown[]).filter((i) => i && typeof i === 'object') : [];
  return { messages: [...instructions, ...items] };
}
