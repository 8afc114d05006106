// Hosted providers: build one from its settings, try a list of them in order.
import type { ProviderSettings } from './types.ts';
import { createBedrockProvider, type BedrockDeps } from './bedrock.ts';
import { createOpenAIProvider } from './openai.ts';
import { createAnthropicProvider } from './anthropic.ts';
import type { ClosableProvider } from './upstream.ts';

export type { ProviderSettings } from './types.ts';
export type { ClosableProvider } from './upstream.ts';

export function createProvider(settings: ProviderSettings, deps: BedrockDeps = {}): ClosableProvider {
  switch (settings.kind) {
    case 'openai':
      return createOpenAIProvider(settings, deps);
    case 'bedrock':
      return createBedrockProvider(settings, deps);
    case 'anthropic':
      return createAnthropicProvider(settings, deps);
    default:
      throw new Error(
        `provider ${(settings as { name?: string }).name}: unknown kind ${JSON.stringify((settings as { kind?: unknown }).kind)}`,
      );
  }
}
