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
import { Type } from '@sinclair/typebox';
import { schemaProblems } from '../config/load.ts';
import {
  ProviderConfig,
  providerListProblems,
  providerSettings,
  type ProviderConfigFile,
} from '../providers/config.ts';
import type { ProviderSettings } from '../providers/types.ts';
import { isRecord } from '../../shared/json.ts';

export const PROVIDERS_KEY = 'providers.yaml';

const ProviderList = Type.Array(ProviderConfig);

/**
 * Validated provider settings from an already-parsed value: a list, or a mapping with a
 * `providers:` list (so a block copied from the agent config works). Throws one clear message.
 */
export function parseProviderList(value: unknown, where = 'providers'): ProviderSettings[] {
  if (value === null || value === undefined) return [];
  const list = isRecord(value) && Object.keys(value).length === 1 && 'providers' in value ? value.providers : value;
  if (list === null || list === undefined) return [];
  if (!Array.isArray(list)) throw new Error(`${where}: expected a list of providers`);
  // Paths come back as `[0].apiKey`; the entry's name is added so the operator finds it.
  const named = (problem: string) => {
    const index = /^\[(\d+)\]/.exec(problem)?.[1];
    const name = index === undefined ? undefined : (list[Number(index)] as { name?: unknown } | undefined)?.name;
    return `${where}${typeof name === 'string' ? problem.replace(/^\[\d+\]/, (m) => `${m} (${name})`) : problem}`;
  };
  const problems = schemaProblems(ProviderList, list);
  if (problems.length === 0) problems.push(...providerListProblems(list as ProviderConfigFile[], ''));
  if (problems.length > 0) throw new Error(problems.map(named).join('; '));
  return (list as ProviderConfigFile[]).map(providerSettings);
}

/** Provider settings from the ConfigMap's data; a missing key means no providers. */
export function parseProvidersConfigMap(data: Record<string, string> | undefined, where: string): ProviderSettings[] {
  const text = data?.[PROVIDERS_KEY];
  if (text === undefined) return [];
  let value: unknown;
  try {
    value = parse(text);
  } catch (err) {
    throw new Error(`${where}: ${PROVIDERS_KEY} is not valid YAML: ${(err as Error).message.split('\n')[0]}`, {
      cause: err,
    });
  }
  return parseProviderList(value, `${where}: ${PROVIDERS_KEY}`);
}
