// Provider settings (docs/configuration.md, "Hosted providers"), one schema for both places they are written: the
// agent config's `providers:` and the providers ConfigMap (agent/cluster/kubernetes-providers.ts).
import { Type, type Static } from '@sinclair/typebox';
import type { ProviderSettings } from './types.ts';
import { parseDuration } from '../../shared/duration.ts';
import { DurationString, Name, SecretRef } from '../../shared/config-schema.ts';

export const DEFAULT_PROVIDER_TIMEOUT_MS = 10_000;

export const ProviderConfig = Type.Object(
  {
    name: Name,
    kind: Type.Union([Type.Literal('openai'), Type.Literal('bedrock'), Type.Literal('anthropic')]),
    endpoint: Type.Optional(Type.String({ pattern: '^https?://', description: 'an http(s) URL' })),
    region: Type.Optional(Name),
    models: Type.Record(Type.String(), Type.String({ minLength: 1 }), {
      minProperties: 1,
      description: 'a non-empty mapping of model → provider model id',
    }),
    apiKey: Type.Optional(SecretRef),
    azureApiVersion: Type.Optional(Name),
    /** kind anthropic: the anthropic-version header (default 2023-06-01). */
    anthropicVersion: Type.Optional(Name),
    credentials: Type.Optional(
      Type.Object(
        { accessKeyId: SecretRef, secretAccessKey: SecretRef, sessionToken: Type.Optional(SecretRef) },
        { additionalProperties: false },
      ),
    ),
    /** Connect + time to response headers. A number is milliseconds. */
    timeout: Type.Optional(
      Type.Union([DurationString, Type.Number({ exclusiveMinimum: 0 })], {
        description: 'duration like 10s (or a number of ms)',
      }),
    ),
    timeoutMs: Type.Optional(Type.Number({ exclusiveMinimum: 0 })),
  },
  { additionalProperties: false },
);

export type ProviderConfigFile = Static<typeof ProviderConfig>;

/** What the schema cannot say: rules across fields and entries. `where` names the list, e.g. `providers`. */
export function providerListProblems(list: readonly ProviderConfigFile[], where: string): string[] {
  const problems: string[] = [];
  const names = new Set<string>();
  list.forEach((p, i) => {
    const at = `${where}[${i}]`;
    if (names.has(p.name)) problems.push(`${at}.name: duplicate provider "${p.name}"`);
    names.add(p.name);
    if (p.kind === 'openai' && !p.endpoint) problems.push(`${at}.endpoint: required for kind openai`);
    if (p.kind === 'bedrock' && !p.region && !p.endpoint)
      problems.push(`${at}.region: required for kind bedrock (or endpoint)`);
    if (p.endpoint !== undefined && !URL.canParse(p.endpoint)) problems.push(`${at}.endpoint: not a URL`);
    if (p.timeout !== undefined && p.timeoutMs !== undefined)
      problems.push(`${at}: give timeout or timeoutMs, not both`);
    else if (p.timeout !== undefined && !(parseDuration(p.timeout) > 0))
      problems.push(`${at}.timeout: must be positive`);
  });
  return problems;
}

/** Settings from a validated entry (defaults applied). */
export function providerSettings(p: ProviderConfigFile): ProviderSettings {
  const settings: ProviderSettings = {
    name: p.name,
    kind: p.kind,
    models: p.models,
    timeoutMs: p.timeoutMs ?? (p.timeout !== undefined ? parseDuration(p.timeout) : DEFAULT_PROVIDER_TIMEOUT_MS),
  };
  if (p.endpoint !== undefined) settings.endpoint = p.endpoint;
  if (p.region !== undefined) settings.region = p.region;
  if (p.apiKey !== undefined) settings.apiKey = p.apiKey;
  if (p.azureApiVersion !== undefined) settings.azureApiVersion = p.azureApiVersion;
  if (p.anthropicVersion !== undefined) settings.anthropicVersion = p.anthropicVersion;
  if (p.credentials !== undefined) settings.credentials = p.credentials;
  return settings;
}
