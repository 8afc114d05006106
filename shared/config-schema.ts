// Schema pieces every part of the agent's config file uses (each domain owns its part, agent/config
// assembles them) and the settings read from the cluster (providers ConfigMap), so a value means
// the same wherever it is written.
import { Type } from '@sinclair/typebox';

export const DurationString = Type.String({
  pattern: '^\\d+(\\.\\d+)?(ms|s|m|h)$',
  description: 'duration like 250ms, 30s, 1m',
});
export const HostPort = Type.String({
  pattern: '^(\\[[0-9a-fA-F:.]+\\]|[A-Za-z0-9.-]+):\\d{1,5}$',
  description: 'host:port',
});
export const Name = Type.String({ minLength: 1, maxLength: 253 });
/** A file is named by its absolute path: the agent's working directory is no place to look for a Secret. */
export const SecretRef = Type.Union(
  [
    Type.Object({ env: Name }, { additionalProperties: false }),
    Type.Object({ file: Type.String({ pattern: '^/', maxLength: 4096 }) }, { additionalProperties: false }),
  ],
  { description: '{env: NAME} or {file: /absolute/path} (credentials are never inlined)' },
);
