// Credentials are referenced, never inlined: `{env: NAME}` or `{file: PATH}`. The resolved value
// never appears in logs, errors or /debug/state; only the reference does.
import { readFileSync } from 'node:fs';

export type SecretRef = { env: string } | { file: string };

export function describeSecret(ref: SecretRef): string {
  return 'env' in ref ? `env ${ref.env}` : `file ${ref.file}`;
}

/** The secret's value, read now (files are re-read, so a rotated Secret volume is picked up). */
export function resolveSecret(ref: SecretRef, env: NodeJS.ProcessEnv = process.env): string {
  if ('env' in ref) {
    const value = env[ref.env];
    if (value === undefined || value === '') throw new Error(`secret ${describeSecret(ref)} is not set`);
    return value;
  }
  try {
    return readFileSync(ref.file, 'utf8').trim();
  } catch {
    throw new Error(`secret ${describeSecret(ref)} cannot be read`);
  }
}
