// Helpers for values that came from JSON or YAML, shared by the agent, its CLI and the simulator.

/** A JSON object (not null, not an array). */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** `/spec/exclude/0/window` → ['spec', 'exclude', 0, 'window'] (JSON pointer unescaped). */
export function pointerSegments(pointer: string): (string | number)[] {
  return pointer
    .split('/')
    .slice(1)
    .map((raw) => {
      const part = raw.replaceAll('~1', '/').replaceAll('~0', '~');
      return /^\d+$/.test(part) ? Number(part) : part;
    });
}

/** `/spec/exclude/0/window` → `spec.exclude[0].window`; the root is ''. */
export function dotPath(pointer: string): string {
  return formatPath(pointerSegments(pointer));
}

/** ['spec', 'exclude', 0, 'window'] → `spec.exclude[0].window`; keys that are not names are quoted. */
export function formatPath(segments: readonly (string | number)[]): string {
  let out = '';
  for (const part of segments) {
    if (typeof part === 'number') out += `[${part}]`;
    else if (/^[A-Za-z_$][\w$-]*$/.test(part)) out += out ? `.${part}` : part;
    else out += `[${JSON.stringify(part)}]`;
  }
  return out;
}
