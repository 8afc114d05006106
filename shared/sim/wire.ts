// vLLM's OpenAI-compatible response shapes, as plain objects. Pure: ids and times come in.

import { STATUS_CODES } from 'node:http';

export interface Usage {
  prompt_tokens: number;
  total_tokens: number;
  completion_tokens: number;
  prompt_tokens_details: null;
}

export function usage(promptTokens: number, completionTokens: number): Usage {
  return {
    prompt_tokens: promptTokens,
    total_tokens: promptTokens + completionTokens,
    completion_tokens: completionTokens,
    prompt_tokens_details: null,
  };
}

/** Fields every completion object and chunk starts with. */
export interface Envelope {
  id: string;
  created: number;
  model: string;
}

export function chatCompletion(env: Envelope, content: string, finishReason: string, u: Usage) {
  return {
    id: env.id,
    object: 'chat.completion',
    created: env.created,
    model: env.model,
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content, tool_calls: [] },
        logprobs: null,
        finish_reason: finishReason,
        stop_reason: null,
      },
    ],
    usage: u,
    prompt_logprobs: null,
  };
}

export function textCompletion(env: Envelope, text: string, finishReason: string, u: Usage) {
  return {
    id: env.id,
    object: 'text_completion',
    created: env.created,
    model: env.model,
    choices: [{ index: 0, text, logprobs: null, finish_reason: finishReason, stop_reason: null }],
    usage: u,
  };
}

/**
 * One streamed chunk. `usageNull` adds `"usage": null`, which OpenAI (and the agent's relay)
 * expect on every chunk but the last when the client asked for `stream_options.include_usage`.
 */
export function chatChunk(
  env: Envelope,
  delta: Record<string, string>,
  finishReason: string | null,
  usageNull: boolean,
) {
  const choice: Record<string, unknown> = { index: 0, delta, logprobs: null, finish_reason: finishReason };
  if (finishReason !== null) choice.stop_reason = null;
  const chunk: Record<string, unknown> = {
    id: env.id,
    object: 'chat.completion.chunk',
    created: env.created,
    model: env.model,
    choices: [choice],
  };
  if (usageNull) chunk.usage = null;
  return chunk;
}

export function completionChunk(env: Envelope, text: string, finishReason: string | null, usageNull: boolean) {
  const choice: Record<string, unknown> = { index: 0, text, logprobs: null, finish_reason: finishReason };
  if (finishReason !== null) choice.stop_reason = null;
  const chunk: Record<string, unknown> = {
    id: env.id,
    object: 'text_completion',
    created: env.created,
    model: env.model,
    choices: [choice],
  };
  if (usageNull) chunk.usage = null;
  return chunk;
}

/** The extra last chunk of `include_usage`: no choices, only usage. */
export function usageChunk(env: Envelope, object: string, u: Usage) {
  return { id: env.id, object, created: env.created, model: env.model, choices: [], usage: u };
}

export function embeddingsResponse(env: Envelope, vectors: number[][], promptTokens: number) {
  return {
    id: env.id,
    object: 'list',
    created: env.created,
    model: env.model,
    data: vectors.map((embedding, index) => ({ index, object: 'embedding', embedding })),
    usage: usage(promptTokens, 0),
  };
}

export function modelList(
  models: readonly string[],
  created: number,
  maxModelLen: number,
  lora: { adapters: readonly string[]; parent: string } = { adapters: [], parent: '' },
) {
  // vLLM lists a LoRA adapter as a model whose parent is the base model (root: the adapter's path).
  const entries = [
    ...models.map((id) => ({ id, root: id, parent: null as string | null })),
    ...lora.adapters.map((id) => ({ id, root: `/adapters/${id}`, parent: lora.parent })),
  ];
  return {
    object: 'list',
    data: entries.map(({ id, root, parent }) => ({
      id,
      object: 'model',
      created,
      owned_by: 'vllm',
      root,
      parent,
      max_model_len: maxModelLen,
      permission: [
        {
          id: `modelperm-${id}`,
          object: 'model_permission',
          created,
          allow_create_engine: false,
          allow_sampling: true,
          allow_logprobs: true,
          allow_search_indices: false,
          allow_view: true,
          allow_fine_tuning: false,
          organization: '*',
          group: null,
          is_blocking: false,
        },
      ],
    })),
  };
}

export interface VllmErrorBody {
  error: { message: string; type: string; param: string | null; code: number };
}

/**
 * vLLM's error body: like OpenAI's, but `type` is named after the HTTP status
 * ("BadRequestError", "NotFoundError") and `code` is the status number.
 */
export function vllmError(status: number, message: string, param: string | null = null): VllmErrorBody {
  const phrase = (STATUS_CODES[status] ?? 'Unknown').replace(/[^A-Za-z]/g, '');
  const type = phrase.endsWith('Error') ? phrase : `${phrase}Error`;
  return { error: { message, type, param, code: status } };
}

export function sse(data: unknown): string {
  return `data: ${JSON.stringify(data)}\n\n`;
}

export const SSE_DONE = 'data: [DONE]\n\n';

// --- The Responses API (/v1/responses), as vLLM serves it ------------------------------------

export interface ResponsesUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

export function responsesUsage(inputTokens: number, outputTokens: number): ResponsesUsage {
  return {
    input_tokens: inputTokens,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: outputTokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: inputTokens + outputTokens,
  };
}

/** The assistant's message item; `messageId` is stable across the stream's events. */
export function responseMessage(messageId: string, text: string, status: 'in_progress' | 'completed') {
  return {
    id: messageId,
    type: 'message',
    role: 'assistant',
    status,
    content: status === 'completed' ? [{ type: 'output_text', text, annotations: [], logprobs: [] }] : [],
  };
}

/** A `response` object. `text` undefined: no output yet (the stream's first events). */
export function responseObject(
  env: Envelope,
  messageId: string,
  status: 'in_progress' | 'completed' | 'incomplete',
  text: string | undefined,
  u: ResponsesUsage | null,
) {
  return {
    id: env.id,
    object: 'response',
    created_at: env.created,
    model: env.model,
    status,
    output: text === undefined ? [] : [responseMessage(messageId, text, 'completed')],
    usage: u,
    error: null,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: null,
    metadata: {},
    parallel_tool_calls: true,
    tool_choice: 'auto',
    tools: [],
    temperature: 1,
    top_p: 1,
    store: false,
  };
}

/** One named Responses stream event: `event: <type>` then its JSON (which repeats the type). */
export function sseEvent(type: string, sequenceNumber: number, fields: Record<string, unknown>): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequenceNumber, ...fields })}\n\n`;
}
