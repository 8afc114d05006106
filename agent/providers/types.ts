// What the overflow chain needs from a hosted provider. Each provider kind is one file of
// translation behind this interface; the chain knows nothing of wire formats.
import type { RequestKind } from '../types.ts';

export interface ProviderCall {
  kind: RequestKind;
  /** The client's model name; the provider maps it to its own id. */
  model: string;
  /** The client's request body (OpenAI's, or Anthropic's for `messages`), already validated. */
  body: Record<string, unknown>;
  /** Aborted when the client leaves or the provider timeout passes. */
  signal: AbortSignal;
  /** Sent as they are: the request id and the client's W3C trace context. */
  headers?: Record<string, string>;
}

export interface Provider {
  readonly name: string;
  readonly kind: ProviderKind;
  /** Client-facing model names this provider can serve (keys of its `models` map). */
  readonly models: readonly string[];
  supports(kind: RequestKind, model: string): boolean;
  /** Why this provider can never take requests of this kind (shown to the client), if so. */
  refusal?(kind: RequestKind): string | undefined;
  /**
   * Sends the call. Resolves with an OpenAI-shaped Response (JSON, or SSE when body.stream),
   * whatever the upstream protocol; a non-2xx status carries an OpenAI error body.
   * Rejects on connection failure or timeout (before the first byte).
   * A failure after the first byte ends the SSE body with an OpenAI error event and `data: [DONE]`.
   */
  send(call: ProviderCall): Promise<Response>;
}

/** A provider as the platform team declares it (config file, or the providers ConfigMap). */
export type ProviderKind = 'openai' | 'bedrock' | 'anthropic';

export interface ProviderSettings {
  name: string;
  kind: ProviderKind;
  /** openai: the base URL an OpenAI client takes (the adapter appends /chat/completions …).
   *  bedrock: defaults to https://bedrock-runtime.{region}.amazonaws.com. */
  endpoint?: string;
  region?: string;
  /** client model name → provider model id (Bedrock model id, Databricks endpoint, Azure deployment). */
  models: Record<string, string>;
  /** Bearer token (OpenAI, Databricks, Bedrock API key) or Azure `api-key`. */
  apiKey?: import('../config/secrets.ts').SecretRef;
  /** anthropic: the `anthropic-version` header (default 2023-06-01). */
  anthropicVersion?: string;
  /** Azure OpenAI: deployment-style paths with this api-version, key in the `api-key` header. */
  azureApiVersion?: string;
  /** Bedrock SigV4 credentials (when no apiKey). */
  credentials?: {
    accessKeyId: import('../config/secrets.ts').SecretRef;
    secretAccessKey: import('../config/secrets.ts').SecretRef;
    sessionToken?: import('../config/secrets.ts').SecretRef;
  };
  /** Connect + time to response headers; past it the chain moves to the next provider. */
  timeoutMs: number;
}
