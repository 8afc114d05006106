// A request's tags: what the caller declares, what the built-in and the platform's detectors find
// in any string of the body, and `unscanned` for what could not be read. Pure.
import { formatPath } from '../../shared/json.ts';
import type { CustomDetector } from './custom.ts';
import { DETECTORS, detect, type Detector } from './detect.ts';
import { normalise } from './normalise.ts';
import { parseTagHeader } from './tags.ts';
import { DEFAULT_SCAN_LIMITS, walkBody, type ScanLimits, type UnscannedReason } from './walk.ts';

export const PII_TAG = 'pii';
/** Added when part of the body could not be read as text; denied by default like pii. */
export const UNSCANNED_TAG = 'unscanned';

export interface Finding {
  /** A built-in detector (tag pii) or a custom detector's name. */
  detector: string;
  tag: string;
  /** Where in the body, e.g. `messages[0].content[1].text`; never the matched text. */
  path: string;
}

export interface Unscanned {
  reason: UnscannedReason;
  path: string;
}

export interface Classification {
  /** Sorted, unique. */
  tags: string[];
  /** Built-in detectors that fired, in DETECTORS order. */
  detectors: Detector[];
  /** Custom detectors that fired, in configuration order. */
  custom: string[];
  /** Where each detector fired (at most MAX_REPORTED each of findings and unscanned). */
  findings: Finding[];
  unscanned: Unscanned[];
  /** Header entries that were not valid tags. */
  rejectedHeaderTags: string[];
}

export interface ClassifyOptions {
  limits?: ScanLimits;
  detectors?: readonly CustomDetector[];
}

/** Evidence kept per request: enough to explain, bounded against bodies built to flood it. */
const MAX_REPORTED = 32;

export function classifyRequest(
  headerTags: string | null | undefined,
  body: unknown,
  options: ClassifyOptions = {},
): Classification {
  const header = parseTagHeader(headerTags);
  const custom = options.detectors ?? [];
  const tags = new Set(header.tags);
  const found = new Set<Detector>();
  const fired = new Set<string>();
  const findings: Finding[] = [];
  const unscanned: Unscanned[] = [];
  const hits = new Set<Detector>();

  walkBody(body, options.limits ?? DEFAULT_SCAN_LIMITS, {
    text(text, path) {
      hits.clear();
      detect(text, hits);
      for (const d of hits) {
        found.add(d);
        tags.add(PII_TAG);
        if (findings.length < MAX_REPORTED) findings.push({ detector: d, tag: PII_TAG, path: formatPath(path) });
      }
      if (custom.length === 0) return;
      const normalised = normalise(text);
      for (const detector of custom) {
        if (!detector.matches(normalised)) continue;
        fired.add(detector.name);
        tags.add(detector.tag);
        if (findings.length < MAX_REPORTED)
          findings.push({ detector: detector.name, tag: detector.tag, path: formatPath(path) });
      }
    },
    unscanned(reason, path) {
      tags.add(UNSCANNED_TAG);
      if (unscanned.length < MAX_REPORTED) unscanned.push({ reason, path: formatPath(path) });
    },
  });

  return {
    tags: [...tags].sort(),
    detectors: DETECTORS.filter((d) => found.has(d)),
    custom: custom.filter((d) => fired.has(d.name)).map((d) => d.name),
    findings,
    unscanned,
    rejectedHeaderTags: header.rejected,
  };
}

/** Sorted unique tags: valid header tags ∪ what the detectors found ∪ `unscanned`. */
export function classify(headerTags: string | null | undefined, body: unknown, options?: ClassifyOptions): string[] {
  return classifyRequest(headerTags, body, options).tags;
}
