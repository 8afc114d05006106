// Anthropic Messages ⇄ Bedrock Converse, as pure functions: what lets a POST /v1/messages overflow
// to Claude on Bedrock. The two APIs are close (turns of typed blocks, system apart, tools with a
// JSON schema); the differences are names and a few shapes: images, tool results, thinking blocks,
// prompt-cache marks (a `cachePoint` block after the marked one), and top_k / thinking, which
// Converse takes as model-specific fields.
import { TranslationError, type ConverseContentBlock, type ConverseRequest } from './bedrock-converse.ts';

type Json = Record<string, unknown>;

const IMAGE_TYPES: Record<string, string> = {
  'image/png': 'png',
  'image/jpeg': 'jpeg',
  'image/gif': 'gif',
  'image/webp': 'webp',
};

const CACHE_POINT: ConverseContentBlock = { cachePoint: { type: 'default' } };

/** Anthropic Messages request → Converse request body (the model id goes in the URL). */
export function messagesToConverse(body: Json): ConverseRequest {
  if (!Array.isArray(body.messages)) throw new TranslationError('messages must be an array', 'messages');
  const out: ConverseRequest = {
    messages: body.messages.map((raw, i) => {
      const m = raw as Json;
      if (m?.role !== 'user' && m?.role !== 'assistant')
        throw new TranslationError('role must be "user" or "assistant"', `messages.${i}.role`);
      return { role: m.role, content: blocksOf(m.content, `messages.${i}.content`) };
    }),
  };
  const system = systemOf(body.system);
  if (system.length > 0) out.system = system;

  const inference: NonNullable<ConverseRequest['inferenceConfig']> = {};
  if (typeof body.max_tokens === 'number') inference.maxTokens = body.max_tokens;
  if (typeof body.temperature === 'number') inference.temperature = body.temperature;
  if (typeof body.top_p === 'number') inference.topP = body.top_p;
  if (Array.isArray(body.stop_sequences) && body.stop_sequences.length > 0)
    inference.stopSequences = body.stop_sequences.map(String);
  if (Object.keys(inference).length > 0) out.inferenceConfig = inference;

  // Claude's own request fields that Converse has no field for travel as model-specific fields.
  const extra: Json = {};
  if (typeof body.top_k === 'number') extra.top_k = body.top_k;
  if (body.thinking && typeof body.thinking === 'object') extra.thinking = body.thinking;
  if (Object.keys(extra).length > 0) out.additionalModelRequestFields = extra;

  const tools = toolConfigOf(body);
  if (tools) out.toolConfig = tools;
  return out;
}

function systemOf(system: unknown): ConverseContentBlock[] {
  if (system === undefined || system === null) return [];
  if (typeof system === 'string') return system === '' ? [] : [{ text: system }];
  if (!Array.isArray(system)) throw new TranslationError('system must be a string or text blocks', 'system');
  return system.flatMap((raw, j) => {
    const b = raw as Json;
    if (b?.type !== 'text' || typeof b.text !== 'string')
      throw new TranslationError('system blocks must be text', `system.${j}`);
    return withCache(b, [{ text: b.text }]);
  });
}

function withCache(block: Json, converted: ConverseContentBlock[]): ConverseContentBlock[] {
  return block.cache_control ? [...converted, CACHE_POINT] : converted;
}

function blocksOf(content: unknown, param: string): ConverseContentBlock[] {
  if (typeof content === 'string') return [{ text: content }];
  if (!Array.isArray(content)) throw new TranslationError('content must be a string or content blocks', param);
  return content.flatMap((raw, j) => {
    const b = raw as Json;
    return withCache(b, [blockOf(b, `${param}.${j}`)]);
  });
}

function blockOf(b: Json, param: string): ConverseContentBlock {
  switch (b?.type) {
    case 'text':
      if (typeof b.text !== 'string') throw new TranslationError('a text block needs text', param);
      return { text: b.text };
    case 'image':
      return imageOf(b.source, param);
    case 'tool_use':
      if (typeof b.id !== 'string' || typeof b.name !== 'string')
        throw new TranslationError('a tool_use block needs id and name', param);
      return { toolUse: { toolUseId: b.id, name: b.name, input: b.input ?? {} } };
    case 'tool_result':
      return toolResultOf(b, param);
    case 'thinking':
      if (typeof b.thinking !== 'string') throw new TranslationError('a thinking block needs thinking', param);
      return {
        reasoningContent: {
          reasoningText: { text: b.thinking, ...(typeof b.signature === 'string' ? { signature: b.signature } : {}) },
        },
      };
    case 'redacted_thinking':
      if (typeof b.data !== 'string') throw new TranslationError('a redacted_thinking block needs data', param);
      return { reasoningContent: { redactedContent: b.data } };
    default:
      throw new TranslationError(
        `content block type ${JSON.stringify(b?.type)} is not supported by this provider`,
        param,
      );
  }
}

function imageOf(source: unknown, param: string): ConverseContentBlock {
  const s = source as Json | undefined;
  const format = typeof s?.media_type === 'string' ? IMAGE_TYPES[s.media_type] : undefined;
  if (s?.type !== 'base64' || typeof s.data !== 'string' || !format)
    throw new TranslationError('images must be base64 (png, jpeg, gif, webp) for this provider', `${param}.source`);
  return { image: { format, source: { bytes: s.data } } };
}

function toolResultOf(b: Json, param: string): ConverseContentBlock {
  if (typeof b.tool_use_id !== 'string') throw new TranslationError('a tool_result needs tool_use_id', param);
  const parts = typeof b.content === 'string' ? [{ type: 'text', text: b.content }] : (b.content ?? []);
  if (!Array.isArray(parts)) throw new TranslationError('tool_result content must be text blocks', `${param}.content`);
  const content = parts.map((raw, k) => {
    const p = raw as Json;
    if (p?.type !== 'text' || typeof p.text !== 'string')
      throw new TranslationError('only text tool results are supported by this provider', `${param}.content.${k}`);
    return { text: p.text };
  });
  return {
    toolResult: { toolUseId: b.tool_use_id, content, ...(b.is_error === true ? { status: 'error' as const } : {}) },
  };
}

function toolConfigOf(body: Json): ConverseRequest['toolConfig'] {
  if (!Array.isArray(body.tools) || body.tools.length === 0) return undefined;
  const tools = body.tools.map((raw, j) => {
    const t = raw as Json;
    // Server tools (web search, code execution …) run at Anthropic: Converse has no such thing.
    if (typeof t?.name !== 'string' || (t.type !== undefined && t.type !== 'custom'))
      throw new TranslationError('only custom tools (name, input_schema) are supported by this provider', `tools.${j}`);
    const spec: { name: string; description?: string; inputSchema: { json: unknown } } = {
      name: t.name,
      inputSchema: { json: t.input_schema ?? { type: 'object', properties: {} } },
    };
    if (typeof t.description === 'string' && t.description !== '') spec.description = t.description;
    return { toolSpec: spec };
  });
  const choice = body.tool_choice as Json | undefined;
  switch (choice?.type) {
    case undefined:
    case 'auto':
      return { tools, toolChoice: { auto: {} } };
    case 'any':
      return { tools, toolChoice: { any: {} } };
    case 'tool':
      if (typeof choice.name !== 'string') throw new TranslationError('tool_choice tool needs a name', 'tool_choice');
      return { tools, toolChoice: { tool: { name: choice.name } } };
    case 'none':
      // Converse has no "none"; the tools stay declared (the history may use them), no choice forced.
      return { tools };
    default:
      throw new TranslationError('unsupported tool_choice', 'tool_choice');
  }
}

/** Converse stopReason → Anthropic stop_reason. */
export function stopReasonOf(stopReason: string | undefined): string {
  switch (stopReason) {
    case 'tool_use':
    case 'max_tokens':
    case 'stop_sequence':
    case 'model_context_window_exceeded':
      return stopReason;
    case 'guardrail_intervened':
    case 'content_filtered':
      return 'refusal';
    default:
      return 'end_turn';
  }
}

export interface ConverseUsage {
  inputTokens?: number;
  outputTokens?: number;
  cacheReadInputTokens?: number;
  cacheWriteInputTokens?: number;
}

/** Converse usage → Anthropic usage (prompt-cache counts when Bedrock reports them). */
export function messagesUsage(usage: ConverseUsage | undefined): Json {
  return {
    input_tokens: usage?.inputTokens ?? 0,
    output_tokens: usage?.outputTokens ?? 0,
    ...(usage?.cacheReadInputTokens !== undefined ? { cache_read_input_tokens: usage.cacheReadInputTokens } : {}),
    ...(usage?.cacheWriteInputTokens !== undefined ? { cache_creation_input_tokens: usage.cacheWriteInputTokens } : {}),
  };
}

/** One Converse output block → an Anthropic content block (none for kinds Anthropic has no block for). */
export function contentBlockOf(block: Json): Json | undefined {
  if (typeof block.text === 'string') return { type: 'text', text: block.text };
  const use = block.toolUse as { toolUseId?: string; name?: string; input?: unknown } | undefined;
  if (use && typeof use.name === 'string')
    return { type: 'tool_use', id: use.toolUseId ?? '', name: use.name, input: use.input ?? {} };
  const reasoning = block.reasoningContent as
    { reasoningText?: { text?: string; signature?: string }; redactedContent?: string } | undefined;
  if (typeof reasoning?.redactedContent === 'string')
    return { type: 'redacted_thinking', data: reasoning.redactedContent };
  if (reasoning?.reasoningText)
    return {
      type: 'thinking',
      thinking: reasoning.reasoningText.text ?? '',
      signature: reasoning.reasoningText.signature ?? '',
    };
  return undefined;
}

/** Converse response → Anthropic `message`. */
export function messageOfConverse(
  res: {
    output?: { message?: { content?: Json[] } };
    stopReason?: string;
    usage?: ConverseUsage;
  },
  meta: { id: string; model: string },
): Json {
  const content = (res.output?.message?.content ?? []).map(contentBlockOf).filter((b) => b !== undefined);
  return {
    id: meta.id,
    type: 'message',
    role: 'assistant',
    model: meta.model,
    content,
    stop_reason: stopReasonOf(res.stopReason),
    stop_sequence: null,
    usage: messagesUsage(res.usage),
  };
}
