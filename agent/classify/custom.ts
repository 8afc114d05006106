// Detectors the platform team adds: named keyword lists and regexes, each adding a tag
// (`project-codename` → `confidential`). Validated once at load; pure at request time.
//
// A backtracking regex engine can take exponential time on a crafted input, and request text is
// crafted by whoever sends it. Two guards: patterns whose repetition can backtrack without end
// (a repeated group that itself repeats or alternates, back-references) are refused at load, and
// every pattern runs on slices of at most REGEX_SLICE characters, so the rest stays polynomial in
// a small bound.

import { normalise } from './normalise.ts';

export interface DetectorSpec {
  name: string;
  /** Tag added to a request when the detector fires. */
  tag: string;
  /** Case-insensitive phrases matched anywhere in a text. */
  keywords?: string[];
  /** A JavaScript regular expression (Unicode mode), without delimiters. */
  pattern?: string;
  ignoreCase?: boolean;
}

export interface CustomDetector {
  name: string;
  tag: string;
  matches(text: string): boolean;
}

export const REGEX_SLICE = 2048;
/** Consecutive slices overlap by this much, so a match up to this long is never cut in two. */
export const REGEX_OVERLAP = 256;
const NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;
const TAG = /^[a-z0-9][a-z0-9._-]{0,63}$/;

export function compileDetectors(specs: readonly DetectorSpec[]): { detectors: CustomDetector[]; errors: string[] } {
  const detectors: CustomDetector[] = [];
  const errors: string[] = [];
  const names = new Set<string>();
  specs.forEach((spec, i) => {
    const where = `detectors[${i}]${typeof spec.name === 'string' ? ` (${spec.name})` : ''}`;
    const problem = checkSpec(spec, names);
    if (problem) return errors.push(`${where}: ${problem}`);
    names.add(spec.name);
    const tests: ((text: string) => boolean)[] = [];
    if (spec.keywords?.length) {
      const keywords = spec.keywords.map((k) => normalise(k).toLowerCase());
      tests.push((text) => {
        const lower = text.toLowerCase();
        return keywords.some((k) => lower.includes(k));
      });
    }
    if (spec.pattern !== undefined) {
      const regex = new RegExp(spec.pattern, spec.ignoreCase ? 'iu' : 'u');
      tests.push((text) => matchesSliced(regex, text));
    }
    detectors.push({ name: spec.name, tag: spec.tag, matches: (text) => tests.some((t) => t(text)) });
  });
  return { detectors, errors };
}

function checkSpec(spec: DetectorSpec, names: ReadonlySet<string>): string | undefined {
  if (typeof spec.name !== 'string' || !NAME.test(spec.name))
    return 'name must be a lowercase name of a-z 0-9 . _ - (at most 63 characters)';
  if (names.has(spec.name)) return 'duplicate name';
  if (typeof spec.tag !== 'string' || !TAG.test(spec.tag))
    return 'tag must be a lowercase tag of a-z 0-9 . _ - (at most 64 characters)';
  if (!spec.keywords?.length && spec.pattern === undefined) return 'needs keywords or a pattern';
  if (spec.keywords?.some((k) => typeof k !== 'string' || k.trim() === '')) return 'keywords must be non-empty strings';
  if (spec.pattern !== undefined) {
    try {
      new RegExp(spec.pattern, 'u');
    } catch (error) {
      return `pattern is not a valid regular expression: ${(error as Error).message}`;
    }
    const unsafe = backtrackingHazard(spec.pattern);
    if (unsafe) return `pattern may take exponential time (${unsafe}); rewrite it without ${unsafe}`;
    if (new RegExp(spec.pattern, 'u').test(''))
      return 'pattern matches the empty string, so it would tag every request';
  }
  return undefined;
}

function matchesSliced(regex: RegExp, text: string): boolean {
  if (text.length <= REGEX_SLICE) return regex.test(text);
  for (let start = 0; start < text.length; start += REGEX_SLICE - REGEX_OVERLAP) {
    if (regex.test(text.slice(start, start + REGEX_SLICE))) return true;
    if (start + REGEX_SLICE >= text.length) break;
  }
  return false;
}

/**
 * The construct that makes a backtracking engine explode, if the pattern has one: a
 * back-reference, or a group repeated without bound whose body itself repeats or alternates
 * (`(a+)+`, `(a|aa)*`, `(\w+\s?)*`).
 */
export function backtrackingHazard(pattern: string): string | undefined {
  // Per open group: does its body repeat or alternate?
  const groups: { risky: boolean }[] = [];
  let lastGroupRisky = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    let closedGroup = false;
    if (c === '\\') {
      const next = pattern[i + 1] ?? '';
      if (/[1-9]/.test(next) || next === 'k') return 'a back-reference';
      i++;
    } else if (c === '[') {
      // Skip the class; `]` right after `[` or `[^` is literal in the u-mode grammar only when escaped.
      for (i++; i < pattern.length && pattern[i] !== ']'; i++) if (pattern[i] === '\\') i++;
    } else if (c === '(') {
      // `(?:`, `(?=`, `(?<name>`: the `?` is syntax, not a quantifier.
      groups.push({ risky: false });
      continue;
    } else if (c === ')') {
      lastGroupRisky = groups.pop()?.risky ?? false;
      closedGroup = true;
    } else if (c === '|') {
      if (groups.length > 0) groups[groups.length - 1].risky = true;
    }
    const q = quantifierAt(pattern, i + 1);
    if (q === undefined) continue;
    if (groups.length > 0) groups[groups.length - 1].risky = true;
    if (closedGroup && q.unbounded && lastGroupRisky) return 'a repeated group that itself repeats or alternates';
    i = q.end - 1;
  }
  return undefined;
}

function quantifierAt(pattern: string, i: number): { end: number; unbounded: boolean } | undefined {
  const c = pattern[i];
  if (c === '*' || c === '+') return { end: i + 1 + (pattern[i + 1] === '?' ? 1 : 0), unbounded: true };
  if (c === '?') return { end: i + 1 + (pattern[i + 1] === '?' ? 1 : 0), unbounded: false };
  if (c === '{') {
    const m = /^\{(\d+)(,(\d*))?\}\??/.exec(pattern.slice(i));
    if (!m) return undefined;
    const max = m[2] === undefined ? Number(m[1]) : m[3] === '' ? Infinity : Number(m[3]);
    return { end: i + m[0].length, unbounded: max > 1 };
  }
  return undefined;
}
