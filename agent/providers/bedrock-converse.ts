// OpenAI chat ⇄ Bedrock Converse, as pure functions. Converse wants strictly alternating
// user/assistant turns, system text apart, tool calls and results as content blocks; OpenAI
// spreads the same things over roles. Everything here is data in, data out.

/** A request the client got wrong for this provider: becomes a 400 naming the parameter. */
export class TranslationError extends Error {
  readonly param: string | null;
  constructor(message: string, param: string | null = null) {
    super(message);
    this.name = 'TranslationError';
    this.param = param;
  }
}

export type ConverseContentBlock =
  | { text: string }
  | { image: { format: string; source: { bytes: string } } }
  | { toolUse: { toolUseId: string; name: string; input: unknown } }
  | { toolResult: { toolUseId: string; content: Array<{ text: string }>; status?: 'error' } }
  | { reasoningContent: { reasoningText: { text: string; signature?: string } } | { redactedContent: string } }
  /** A prompt-cache mark after the blocks before it (Anthropic's cache_control). */
  | { cachePoint: { type: 'default' } };

export interface ConverseMessage {
  role: 'user' | 'assistant';
  content: ConverseContentBlock[];
}

export interface ConverseRequest {
  messages: ConverseMessage[];
  system?: ConverseContentBlock[];
  inferenceConfig?: { maxTokens?: number; temperature?: number; topP?: number; stopSequences?: string[] };
  toolConfig?: {
    tools: Array<{ toolSpec: { name: string; description?: string; inputSchema: { json: unknown } } }>;
    toolChoice?: { auto: Record<string, never> } | { any: Record<string, never> } | { tool: { name: string } };
  };
  /** Fields the model takes beyond Converse's own (Claude's top_k, thinking). */
  additionalModelRequestFields?: Record<string, unknown>;
}

export interface ConverseResponse {
  output?: { message?: { role?: string; content?: Array<Record<string, unknown>> } };
  stopReason?: string;
  usage?: { inputTokens?: number; outputTokens?: number; totalTokens?: number };
}

export interface OpenAIUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export interface OpenAIToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

type Json = Record<string, unknown>;

const IMAGE_FORMATS = new Set(['png', 'jpeg', 'gif', 'webp']);

/** OpenAI chat request → Converse request body (the model id goes in the URL, not here). */
export function toConverseRequest(body: Json): ConverseRequest {
  if (!Array.isArray(body.messages)) throw new TranslationError('messages must be an array', 'messages');
  if (typeof body.n === 'number' && body.n > 1)
    throw new TranslationError('n > 1 is not supported by this provider', 'n');

  const system: Array<{ text: string }> = [];
  const turns: ConverseMessage[] = [];
  const push = (role: 'user' | 'assistant', content: ConverseContentBlock[]) => {
    if (content.length === 0) return;
    const last = turns[turns.length - 1];
    // Converse requires alternating roles: consecutive same-role messages become one turn.
    if (last && last.role === role) last.content.push(...content);
    else turns.push({ role, content: [...content] });
  };

  body.messages.forEach((raw, i) => {
    if (!raw || typeof raw !== 'object') throw new TranslationError('each message must be an object', `messages[${i}]`);
    const m = raw as Json;
    switch (m.role) {
      case 'system':
      case 'developer':
        for (const text of textParts(m.content, `messages[${i}].content`)) system.push({ text });
        return;
      case 'user':
        push('user', userContent(m.content, `messages[${i}].content`));
        return;
      case 'assistant':
        push('assistant', assistantContent(m, i));
        return;
      case 'tool': {
        if (typeof m.tool_call_id !== 'string')
          throw new TranslationError('tool messages need tool_call_id', `messages[${i}].tool_call_id`);
        const texts = textParts(m.content, `messages[${i}].content`);
        push('user', [{ toolResult: { toolUseId: m.tool_call_id, content: texts.map((text) => ({ text })) } }]);
        return;
      }
      default:
        throw new TranslationError(`unsupported message role ${JSON.stringify(m.role)}`, `messages[${i}].role`);
    }
  });

  const out: ConverseRequest = { messages: turns };
  if (system.length > 0) out.system = system;

  const inference: NonNullable<ConverseRequest['inferenceConfig']> = {};
  const maxTokens = body.max_completion_tokens ?? body.max_tokens;
  if (typeof maxTokens === 'number') inference.maxTokens = maxTokens;
  if (typeof body.temperature === 'number') inference.temperature = body.temperature;
  if (typeof body.top_p === 'number') inference.topP = body.top_p;
  if (typeof body.stop === 'string') inference.stopSequences = [body.stop];
  else if (Array.isArray(body.stop) && body.stop.length > 0) inference.stopSequences = body.stop.map(String);
  if (Object.keys(inference).length > 0) out.inferenceConfig = inference;

  const toolConfig = toToolConfig(body, turns);
  if (toolConfig) out.toolConfig = toolConfig;
  return out;
}

function textParts(content: unknown, param: string): string[] {
  if (typeof content === 'string') return content === '' ? [] : [content];
  if (content === null || content === undefined) return [];
  if (!Array.isArray(content)) throw new TranslationError('content must be a string or an array of parts', param);
  return content
    .map((part, j) => {
      const p = part as Json;
      if (p && p.type === 'text' && typeof p.text === 'string') return p.text;
      throw new TranslationError('only text parts are supported here', `${param}[${j}]`);
    })
    .filter((t) => t !== '');
}

function userContent(content: unknown, param: string): ConverseContentBlock[] {
  if (!Array.isArray(content)) return textParts(content, param).map((text) => ({ text }));
  const blocks: ConverseContentBlock[] = [];
  content.forEach((part, j) => {
    const p = part as Json;
    if (p && p.type === 'text' && typeof p.text === 'string') {
      if (p.text !== '') blocks.push({ text: p.text });
    } else if (p && p.type === 'image_url') {
      blocks.push(imageBlock(p.image_url, `${param}[${j}]`));
    } else {
      throw new TranslationError(`unsupported content part ${JSON.stringify(p?.type)}`, `${param}[${j}]`);
    }
  });
  return blocks;
}

function imageBlock(imageUrl: unknown, param: string): ConverseContentBlock {
  const url = typeof imageUrl === 'string' ? imageUrl : (imageUrl as Json | undefined)?.url;
  const match = typeof url === 'string' ? /^data:image\/([a-z]+);base64,(.*)$/s.exec(url) : null;
  const format = match?.[1] === 'jpg' ? 'jpeg' : match?.[1];
  if (!match || !format || !IMAGE_FORMATS.has(format)) {
    throw new TranslationError('images must be base64 data URLs (png, jpeg, gif, webp) for this provider', param);
  }
  return { image: { format, source: { bytes: match[2] } } };
}

function assistantContent(m: Json, i: number): ConverseContentBlock[] {
  const blocks: ConverseContentBlock[] = [];
  if (Array.isArray(m.content)) {
    m.content.forEach((part, j) => {
      const p = part as Json;
      const text = p?.type === 'text' ? p.text : p?.type === 'refusal' ? p.refusal : undefined;
      if (typeof text !== 'string')
        throw new TranslationError('only text parts are supported here', `messages[${i}].content[${j}]`);
      if (text !== '') blocks.push({ text });
    });
  } else {
    for (const text of textParts(m.content, `messages[${i}].content`)) blocks.push({ text });
  }
  if (Array.isArray(m.tool_calls)) {
    m.tool_calls.forEach((raw, j) => {
      const call = raw as Json;
      const fn = call?.function as Json | undefined;
      const param = `messages[${i}].tool_calls[${j}]`;
      if (typeof call?.id !== 'string' || typeof fn?.name !== 'string')
        throw new TranslationError('tool calls need id and function.name', param);
      let input: unknown = {};
      const args = fn.arguments;
      if (typeof args === 'string' && args.trim() !== '') {
        try {
          input = JSON.parse(args);
        } catch {
          throw new TranslationError('tool call arguments must be JSON', `${param}.function.arguments`);
        }
      }
      blocks.push({ toolUse: { toolUseId: call.id, name: fn.name, input } });
    });
  }
  return blocks;
}

function toToolConfig(body: Json, turns: ConverseMessage[]): ConverseRequest['toolConfig'] {
  if (!Array.isArray(body.tools) || body.tools.length === 0) return undefined;
  const tools = body.tools.map((raw, j) => {
    const t = raw as Json;
    const fn = t?.function as Json | undefined;
    if (t?.type !== 'function' || typeof fn?.name !== 'string')
      throw new TranslationError('only function tools are supported', `tools[${j}]`);
    const spec: { name: string; description?: string; inputSchema: { json: unknown } } = {
      name: fn.name,
      inputSchema: { json: fn.parameters ?? { type: 'object', properties: {} } },
    };
    if (typeof fn.description === 'string' && fn.description !== '') spec.description = fn.description;
    return { toolSpec: spec };
  });
  const choice = body.tool_choice;
  if (choice === undefined || choice === 'auto') return { tools, toolChoice: { auto: {} } };
  if (choice === 'required') return { tools, toolChoice: { any: {} } };
  if (choice === 'none') {
    // Converse has no "none". Without tool blocks in the history we can drop the tools, which
    // is exactly "none"; with them Converse insists on a toolConfig, so keep it without a choice.
    const history = turns.some((t) => t.content.some((b) => 'toolUse' in b || 'toolResult' in b));
    return history ? { tools } : undefined;
  }
  const named = (choice as Json | null)?.function as Json | undefined;
  if (typeof named?.name === 'string') return { tools, toolChoice: { tool: { name: named.name } } };
  throw new TranslationError('unsupported tool_choice', 'tool_choice');
}

/** Converse stopReason → OpenAI finish_reason. */
export function finishReason(stopReason: string | undefined): string {
  switch (stopReason) {
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length';
    case 'tool_use':
      return 'tool_calls';
    case 'guardrail_intervened':
    case 'content_filtered':
      return 'content_filter';
    default:
      return 'stop';
  }
}

export function toUsage(usage: ConverseResponse['usage'] | undefined): OpenAIUsage {
  const prompt = usage?.inputTokens ?? 0;
  const completion = usage?.outputTokens ?? 0;
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: usage?.totalTokens ?? prompt + completion,
  };
}

/** Converse response → OpenAI chat.completion. */
export function fromConverseResponse(
  res: ConverseResponse,
  meta: { id: string; created: number; model: string },
): Json {
  let text = '';
  const toolCalls: OpenAIToolCall[] = [];
  for (const block of res.output?.message?.content ?? []) {
    if (typeof block.text === 'string') text += block.text;
    const use = block.toolUse as { toolUseId?: string; name?: string; input?: unknown } | undefined;
    if (use && typeof use.name === 'string') {
      toolCalls.push({
        id: use.toolUseId ?? `call_${toolCalls.length}`,
        type: 'function',
        function: { name: use.name, arguments: JSON.stringify(use.input ?? {}) },
      });
    }
  }
  const message: Json = { role: 'assistant', content: text === '' && toolCalls.length > 0 ? null : text };
  if (toolCalls.length > 0) message.tool_calls = toolCalls;
  return {
    id: meta.id,
    object: 'chat.completion',
    created: meta.created,
    model: meta.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishReason(res.stopReason) }],
    usage: toUsage(res.usage),
  };
}

/**
 * A Bedrock error (HTTP status + `x-amzn-errortype`, or a stream exception's type) → the status
 * we answer with. Throttling stays 429 (the chain fails over and the client may retry); the
 * client's own mistakes stay 4xx; Bedrock's internal failures become 502/503.
 */
export function bedrockErrorStatus(errorType: string | undefined, httpStatus: number): number {
  const type = (errorType ?? '').split(':')[0].toLowerCase();
  switch (type) {
    case 'throttlingexception':
    case 'servicequotaexceededexception':
    case 'toomanyrequestsexception':
      return 429;
    case 'validationexception':
      return 400;
    case 'accessdeniedexception':
    case 'unrecognizedclientexception':
    case 'invalidsignatureexception':
    case 'expiredtokenexception':
    case 'incompletesignatureexception':
      return 403;
    case 'resourcenotfoundexception':
      return 404;
    case 'modeltimeoutexception':
      return 504;
    case 'serviceunavailableexception':
    case 'modelnotreadyexception':
      return 503;
    case 'internalserverexception':
    case 'modelstreamerrorexception':
    case 'modelerrorexception':
      return 502;
  }
  if (httpStatus === 429) return 429;
  if (httpStatus === 503) return 503;
  if (httpStatus >= 500) return 502;
  if (httpStatus >= 400) return httpStatus;
  return 502;
}

/** The short error type name (`ThrottlingException`) from `x-amzn-errortype` or an event header. */
export function bedrockErrorCode(errorType: string | undefined): string | null {
  const type = (errorType ?? '').split(':')[0].trim();
  return type === '' ? null : type;
}
