// A request's tags: what the caller declares plus what the built-in detectors find. Pure.
import { DETECTORS, detect, type Detector } from './detect.ts';
import { parseTagHeader } from './tags.ts';
import { forEachText } from './texts.ts';

export const PII_TAG = 'pii';

export interface Classification {
  /** Sorted, unique. */
  tags: string[];
  /** Detectors that fired, in DETECTORS order (for explain and metrics). */
  detectors: Detector[];
  /** Header entries that were not valid tags. */
  rejectedHeaderTags: string[];
}

export function classifyRequest(headerTags: string | null | undefined, body: unknown): Classification {
  const header = parseTagHeader(headerTags);
  const found = new Set<Detector>();
  forEachText(body, (text) => detect(text, found));
  const tags = new Set(header.tags);
  if (found.size > 0) tags.add(PII_TAG);
  return {
    tags: [...tags].sort(),
    detectors: DETECTORS.filter((d) => found.has(d)),
    rejectedHeaderTags: header.rejected,
  };
}

/** Sorted unique tags: valid header tags ∪ `pii` when any detector fires. */
export function classify(headerTags: string | null | undefined, body: unknown): string[] {
  return classifyRequest(headerTags, body).tags;
}
