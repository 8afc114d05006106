// The pod credentials' part of the agent's config file: the API keys model-server pods were started
// with, sent by the pod client (agent/config assembles the file).
import { Type } from '@sinclair/typebox';
import { Name, SecretRef } from '../../shared/config-schema.ts';
import type { SecretRef as SecretReference } from '../config/secrets.ts';

/** The API key a model-server pod was started with (`vllm --api-key`): for every pod, a namespace's, or one pod's. */
export const PodCredentialConfig = Type.Object(
  { namespace: Type.Optional(Name), pod: Type.Optional(Name), apiKey: SecretRef },
  { additionalProperties: false },
);

/** The key sent to matching model-server pods: `pod` (NAME or NAMESPACE/NAME) beats `namespace` beats neither. */
export interface PodCredential {
  namespace?: string;
  pod?: string;
  apiKey: SecretReference;
}
