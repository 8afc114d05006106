// Every text an OpenAI-style request carries, in the places a person's data can be:
//   chat         messages[].content (string, or parts with a `text`), messages[].refusal,
//                messages[].tool_calls[].function.arguments, messages[].function_call.arguments
//   completions  prompt (string or list of strings), suffix
//   embeddings   input (string, list of strings, or message-like items with `content`)
//   any          system (string or parts, as some clients send it), user (often an e-mail)
// Token-id arrays are numbers, not text, and are skipped. Tool *definitions* (`tools[]`) are not
// scanned: they are the application's API description, the same on every request, and a support
// address in one would pin every request of that app to the cluster.

export function forEachText(body: unknown, visit: (text: string) => void): void {
  if (!isRecord(body)) return;
  const { messages, prompt, suffix, input, system, user } = body;
  if (Array.isArray(messages)) {
    for (const message of messages) {
      if (!isRecord(message)) continue;
      content(message.content, visit);
      if (typeof message.refusal === 'string') visit(message.refusal);
      if (Array.isArray(message.tool_calls)) {
        for (const call of message.tool_calls) {
          if (isRecord(call) && isRecord(call.function)) args(call.function.arguments, visit);
        }
      }
      if (isRecord(message.function_call)) args(message.function_call.arguments, visit);
    }
  }
  strings(prompt, visit);
  if (typeof suffix === 'string') visit(suffix);
  if (Array.isArray(input)) {
    for (const item of input) {
      if (typeof item === 'string') visit(item);
      else if (isRecord(item)) content(item.content, visit);
    }
  } else if (typeof input === 'string') visit(input);
  content(system, visit);
  if (typeof user === 'string') visit(user);
}

/** All of them, in order (for tests and explain). */
export function requestTexts(body: unknown): string[] {
  const texts: string[] = [];
  forEachText(body, (text) => texts.push(text));
  return texts;
}

function content(value: unknown, visit: (text: string) => void): void {
  if (typeof value === 'string') visit(value);
  else if (Array.isArray(value)) {
    for (const part of value) {
      if (typeof part === 'string') visit(part);
      else if (isRecord(part)) {
        if (typeof part.text === 'string') visit(part.text);
        if (typeof part.refusal === 'string') visit(part.refusal);
      }
    }
  }
}

function strings(value: unknown, visit: (text: string) => void): void {
  if (typeof value === 'string') visit(value);
  else if (Array.isArray(value)) for (const item of value) if (typeof item === 'string') visit(item);
}

function args(value: unknown, visit: (text: string) => void): void {
  // Arguments are a JSON string; scanning the raw JSON finds the same values, without parsing.
  if (typeof value === 'string') visit(value);
  else if (value !== undefined && value !== null) visit(JSON.stringify(value));
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
