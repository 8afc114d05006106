// The validator's words: what a field expected and what it found, with a "did you mean" for a
// misspelt key. Separate from validate.ts because crd.ts reads schemas the same way (literalValues).
import type { TSchema } from '@sinclair/typebox';

// ValueErrorType numbers from @sinclair/typebox/errors (0.34), kept local so the hot checks stay plain.
const OBJECT_ADDITIONAL_PROPERTIES = 42;
const OBJECT_REQUIRED_PROPERTY = 45;

/** One schema error as a sentence: what was expected and what was found. */
export function describeError(type: number, schema: TSchema, value: unknown, key: string): string {
  if (type === OBJECT_ADDITIONAL_PROPERTIES) {
    // The schema here is the parent object's; the unknown key is the path's last segment.
    const known = Object.keys((schema as { properties?: object }).properties ?? {});
    const hint = closest(key, known);
    return `unknown field, expected one of ${known.join(', ')}${hint ? ` (did you mean "${hint}"?)` : ''}`;
  }
  if (type === OBJECT_REQUIRED_PROPERTY) return `missing, expected ${expectedOf(schema)}`;
  return `expected ${expectedOf(schema)}, found ${found(value)}`;
}

function expectedOf(schema: TSchema): string {
  if (typeof schema.expected === 'string') return schema.expected;
  const literals = literalValues(schema);
  if (literals) return literals.length === 1 ? JSON.stringify(literals[0]) : `one of ${literals.join(', ')}`;
  switch (schema.type) {
    case 'object':
      return 'an object';
    case 'array':
      return 'a list';
    case 'number':
      return typeof schema.minimum === 'number' ? `a number ≥ ${schema.minimum}` : 'a number';
    case 'integer':
      return 'an integer';
    case 'boolean':
      return 'true or false';
    case 'string':
      return schema.minLength ? 'a non-empty string' : 'a string';
    default:
      return 'a valid value';
  }
}

export function literalValues(schema: TSchema): unknown[] | undefined {
  if ('const' in schema) return [schema.const];
  if (Array.isArray(schema.anyOf) && schema.anyOf.every((s: TSchema) => 'const' in s)) {
    return schema.anyOf.map((s: TSchema) => s.const);
  }
  return undefined;
}

function found(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (value === null) return 'null';
  if (typeof value === 'string') return JSON.stringify(value.length > 60 ? `${value.slice(0, 57)}...` : value);
  if (Array.isArray(value)) return value.length === 0 ? 'an empty list' : `a list of ${value.length}`;
  if (typeof value === 'object') return 'an object';
  return String(value);
}

function closest(key: string, candidates: string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of candidates) {
    const d = editDistance(key.toLowerCase(), candidate.toLowerCase());
    if (d < bestDistance) [best, bestDistance] = [candidate, d];
  }
  return bestDistance <= Math.max(1, Math.floor(key.length / 3)) ? best : undefined;
}

function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) {
      next[j] = Math.min(row[j] + 1, next[j - 1] + 1, row[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    row = next;
  }
  return row[b.length];
}
