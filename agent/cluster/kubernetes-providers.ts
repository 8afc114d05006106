// The providers ConfigMap (key `providers.yaml`): the same list the agent config's `providers:`
// takes, so one declaration works in both modes. Credentials stay references: `{file: PATH}` to a
// mounted Secret (re-read on use, so rotation needs no restart) or `{env: NAME}`; never values.
//
//   - name: databricks
//     kind: openai
//     endpoint: https://example.cloud.databricks.com/serving-endpoints
//     models: {llama-3-8b: databricks-meta-llama-3-1-8b-instruct}
//     apiKey: {file: /var/run/secrets/kinference/kinference-providers/databricks-token}
//     timeout: 10s
//
// A file is accepted or rejected whole: half a provider list would silently change which
// requests may overflow, so the caller keeps the last good list and reports the error.
import { parse } from 'yaml';
import { parseDuration } from '../config/duration.ts';
import type { SecretRef } from '../config/secrets.ts';
import type { ProviderSettings } from '../providers/types.ts';
import { isRecord } from '../../shared/json.ts';

export const PROVIDERS_KEY = 'providers.yaml';
export const DEFAULT_PROVIDER_TIMEOUT_MS = 10_000;

const KINDS = ['openai', 'bedrock'] as const;
const FIELDS = new Set(['name', 'kind', 'endpoint', 'region', 'models', 'apiKey', 'azureApiVersion', 'credentials', 'timeout', 'timeoutMs']);
const CREDENTIAL_FIELDS = new Set(['accessKeyId', 'secretAccessKey', 'sessionToken']);


function secretRef(value: unknown, where: string): SecretRef {
  if (!isRecord(value)) throw new Error(`${where}: expected {env: NAME} or {file: PATH}`);
  const keys = Object.keys(value);
  if (keys.length === 1 && keys[0] === 'env' && typeof value.env === 'string' && value.env !== '') {
    return { env: value.env };
  }
  if (keys.length === 1 && keys[0] === 'file' && typeof value.file === 'string' && value.file.startsWith('/')) {
    return { file: value.file };
  }
  throw new Error(`${where}: expected {env: NAME} or {file: /absolute/path} (credentials are never inlined)`);
}

function optionalString(entry: Record<string, unknown>, key: string, where: string): string | undefined {
  const value = entry[key];
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || value === '') throw new Error(`${where}.${key}: expected a non-empty string`);
  return value;
}

function provider(entry: unknown, where: string): ProviderSettings {
  if (!isRecord(entry)) throw new Error(`${where}: expected a mapping`);
  for (const key of Object.keys(entry)) {
    if (!FIELDS.has(key)) throw new Error(`${where}: unknown field "${key}"`);
  }
  const name = optionalString(entry, 'name', where);
  if (name === undefined) throw new Error(`${where}.name: required`);
  where = `${where} (${name})`;
  const kind = entry.kind;
  if (typeof kind !== 'string' || !(KINDS as readonly string[]).includes(kind)) {
    throw new Error(`${where}.kind: expected one of ${KINDS.join(', ')}`);
  }
  if (!isRecord(entry.models) || Object.keys(entry.models).length === 0) {
    throw new Error(`${where}.models: expected a non-empty mapping of model → provider model id`);
  }
  const models: Record<string, string> = {};
  for (const [model, id] of Object.entries(entry.models)) {
    if (typeof id !== 'string' || id === '') throw new Error(`${where}.models.${model}: expected a provider model id`);
    models[model] = id;
  }
  const endpoint = optionalString(entry, 'endpoint', where);
  if (endpoint !== undefined) {
    let url: URL;
    try {
      url = new URL(endpoint);
    } catch {
      throw new Error(`${where}.endpoint: not a URL`);
    }
    if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new Error(`${where}.endpoint: expected http(s)`);
  }
  const region = optionalString(entry, 'region', where);
  if (kind === 'openai' && endpoint === undefined) throw new Error(`${where}.endpoint: required for kind openai`);
  if (kind === 'bedrock' && endpoint === undefined && region === undefined) {
    throw new Error(`${where}: kind bedrock needs region (or endpoint)`);
  }
  let timeoutMs = DEFAULT_PROVIDER_TIMEOUT_MS;
  if (entry.timeout !== undefined && entry.timeoutMs !== undefined) throw new Error(`${where}: give timeout or timeoutMs, not both`);
  const timeout = entry.timeout ?? entry.timeoutMs;
  if (timeout !== undefined) {
    if (typeof timeout !== 'string' && typeof timeout !== 'number') throw new Error(`${where}.timeout: expected a duration like 10s`);
    try {
      timeoutMs = parseDuration(timeout);
    } catch (err) {
      throw new Error(`${where}.timeout: ${(err as Error).message}`, { cause: err });
    }
    if (timeoutMs <= 0) throw new Error(`${where}.timeout: must be positive`);
  }
  const settings: ProviderSettings = { name, kind: kind as ProviderSettings['kind'], models, timeoutMs };
  if (endpoint !== undefined) settings.endpoint = endpoint;
  if (region !== undefined) settings.region = region;
  const azureApiVersion = optionalString(entry, 'azureApiVersion', where);
  if (azureApiVersion !== undefined) settings.azureApiVersion = azureApiVersion;
  if (entry.apiKey !== undefined) settings.apiKey = secretRef(entry.apiKey, `${where}.apiKey`);
  if (entry.credentials !== undefined) {
    const creds = entry.credentials;
    if (!isRecord(creds)) throw new Error(`${where}.credentials: expected {accessKeyId, secretAccessKey, sessionToken?}`);
    for (const key of Object.keys(creds)) {
      if (!CREDENTIAL_FIELDS.has(key)) throw new Error(`${where}.credentials: unknown field "${key}"`);
    }
    settings.credentials = {
      accessKeyId: secretRef(creds.accessKeyId, `${where}.credentials.accessKeyId`),
      secretAccessKey: secretRef(creds.secretAccessKey, `${where}.credentials.secretAccessKey`),
    };
    if (creds.sessionToken !== undefined) {
      settings.credentials.sessionToken = secretRef(creds.sessionToken, `${where}.credentials.sessionToken`);
    }
  }
  return settings;
}

/**
 * Validated provider settings from an already-parsed value: a list, or a mapping with a
 * `providers:` list (so a block copied from the agent config works). Throws one clear message.
 */
export function parseProviderList(value: unknown, where = 'providers'): ProviderSettings[] {
  if (value === null || value === undefined) return [];
  const list = isRecord(value) && Object.keys(value).length === 1 && 'providers' in value ? value.providers : value;
  if (list === null || list === undefined) return [];
  if (!Array.isArray(list)) throw new Error(`${where}: expected a list of providers`);
  const seen = new Set<string>();
  return list.map((entry, i) => {
    const settings = provider(entry, `${where}[${i}]`);
    if (seen.has(settings.name)) throw new Error(`${where}[${i}]: duplicate provider name "${settings.name}"`);
    seen.add(settings.name);
    return settings;
  });
}

/** Provider settings from the ConfigMap's data; a missing key means no providers. */
export function parseProvidersConfigMap(data: Record<string, string> | undefined, where: string): ProviderSettings[] {
  const text = data?.[PROVIDERS_KEY];
  if (text === undefined) return [];
  let value: unknown;
  try {
    value = parse(text);
  } catch (err) {
    throw new Error(`${where}: ${PROVIDERS_KEY} is not valid YAML: ${(err as Error).message.split('\n')[0]}`, { cause: err });
  }
  return parseProviderList(value, `${where}: ${PROVIDERS_KEY}`);
}
