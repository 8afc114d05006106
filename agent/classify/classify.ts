// A request's tags: what the caller declares, what the built-in and the platform's detectors find
// in any string of the body, and `unscanned` for what could not be read. Pure.
import { formatPath } from '../../shared/json.ts';
import type { CustomDetector } from './custom.ts';
import { forEachForm, type Decoding } from './decode.ts';
import { headerPath, offClusterHeaders } from './headers.ts';
import { DETECTORS, scan, type Detector } from './detect.ts';
import { parseTagHeader } from './tags.ts';
import { DEFAULT_SCAN_LIMITS, walkBody, type ScanLimits, type UnscannedReason } from './walk.ts';

export const PII_TAG = 'pii';
/** Added when part of the body could not be read as text; denied by default like pii. */
export const UNSCANNED_TAG = 'unscanned';

export interface Finding {
  /** A built-in detector (tag pii) or a custom detector's name. */
  detector: string;
  tag: string;
  /** Where in the body, e.g. `messages[0].content[1].text`, or `headers["x-request-id"]`; never the matched text. */
  path: string;
  /** The decodings of the form that fired (`url`, `base64`, `json-escapes+unicode`); absent: the text as it came. */
  via?: string;
  /** Fired only on the text read across the boundaries between the items of the array at `path`. */
  seam?: true;
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
  /**
   * The header values the request would carry to a provider (name → value, names lowercase):
   * those OFF_CLUSTER_HEADERS allows are classified like the body, the rest never leave.
   */
  headers?: Readonly<Record<string, string>>;
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
  /** Detectors already reported for the current text, whichever form they fired in first. */
  const reported = new Set<string>();

  const inspect = (text: string, where: () => string, seam: boolean) => {
    reported.clear();
    forEachForm(
      text,
      (form, via) => {
        hits.clear();
        scan(form, hits);
        for (const d of hits) {
          if (reported.has(d)) continue;
          reported.add(d);
          found.add(d);
          tags.add(PII_TAG);
          if (findings.length < MAX_REPORTED) findings.push(finding(d, PII_TAG, where(), via, seam));
        }
        for (const detector of custom) {
          const key = `custom:${detector.name}`;
          if (reported.has(key) || !detector.matches(form)) continue;
          reported.add(key);
          fired.add(detector.name);
          tags.add(detector.tag);
          if (findings.length < MAX_REPORTED) findings.push(finding(detector.name, detector.tag, where(), via, seam));
        }
      },
      seam,
    );
  };

  for (const [name, value] of Object.entries(offClusterHeaders(options.headers)))
    inspect(value, () => headerPath(name), false);
  walkBody(body, options.limits ?? DEFAULT_SCAN_LIMITS, {
    text: (text, path, seam) => inspect(text, () => formatPath(path), seam),
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

function finding(detector: string, tag: string, path: string, via: readonly Decoding[], seam: boolean): Finding {
  const f: Finding = { detector, tag, path };
  if (via[0] !== 'text') f.via = via.join('+');
  if (seam) f.seam = true;
  return f;
}

/**
 * `c` with what the detectors find in the header values a provider would receive: for a body
 * judged elsewhere (a worker thread), whose headers are classified where the request is.
 */
export function withForwardedHeaders(
  c: Classification,
  headers: Readonly<Record<string, string>>,
  options: Omit<ClassifyOptions, 'headers'> = {},
): Classification {
  const h = classifyRequest(null, undefined, { ...options, headers });
  if (h.findings.length === 0) return c;
  return {
    tags: [...new Set([...c.tags, ...h.tags])].sort(),
    detectors: DETECTORS.filter((d) => c.detectors.includes(d) || h.detectors.includes(d)),
    custom: [...new Set([...c.custom, ...h.custom])],
    findings: [...h.findings, ...c.findings].slice(0, MAX_REPORTED),
    unscanned: c.unscanned,
    rejectedHeaderTags: c.rejectedHeaderTags,
  };
}

/** Sorted unique tags: valid header tags ∪ what the detectors found ∪ `unscanned`. */
export function classify(headerTags: string | null | undefined, body: unknown, options?: ClassifyOptions): string[] {
  return classifyRequest(headerTags, body, options).tags;
}
