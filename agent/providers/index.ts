// Hosted providers: build one from its settings, try a list of them in order.
import type { ProviderSettings } from './types.ts';
import { createBedrockProvider, type BedrockDeps } from './bedrock.ts';
import { createOpenAIProvider } from './openai.ts';
import type { ClosableProvider } from './upstream.ts';

export type { Provider, ProviderCall, ProviderSettings } from './types.ts';
export type { ClosableProvider, ProviderDeps } from './upstream.ts';
export { ProviderError, isProviderFault } from './upstream.ts';
export { BreakerSet, CircuitBreaker, type BreakerOptions, type BreakerState } from './breaker.ts';
export { tryProviders, type Attempt, type ChainOptions, type ChainResult } from './chain.ts';
export { createBedrockProvider } from './bedrock.ts';
export { createOpenAIProvider } from './openai.ts';

export function createProvider(settings: ProviderSettings, deps: BedrockDeps = {}): ClosableProvider {
  switch (settings.kind) {
    case 'openai':
      return createOpenAIProvider(settings, deps);
    case 'bedrock':
      return createBedrockProvider(settings, deps);
    default:
      throw new Error(
        `provider ${(settings as { name?: string }).name}: unknown kind ${JSON.stringify((settings as { kind?: unknown }).kind)}`,
      );
  }
}
