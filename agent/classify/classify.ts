// A request's tags: what the caller declares, what the built-in and the platform's detectors find
// in any string of the body, and `unscanned` for what could not be read. Pure.
import { formatPath } from '../../shared/json.ts';
import type { CustomDetector } from './custom.ts';
import { forEachForm, type Decoding } from './decode.ts';
import { headerPath, OFF_CLUSTER_HEADERS } from './headers.ts';
import { DETECTORS, scan as scanForm, type Detector } from './detect.ts';
import { parseTagHeader } from './tags.ts';
import { DEFAULT_SCAN_LIMITS, walkBody, type PathSegment, type ScanLimits, type UnscannedReason } from './walk.ts';

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
  const scan = new RequestScan(header.tags, options.detectors ?? NO_DETECTORS);
  const headers = options.headers;
  if (headers)
    for (const name of OFF_CLUSTER_HEADERS) {
      const value = headers[name];
      if (value !== undefined) scan.inspect(value, headerPath(name), false);
    }
  if (body !== undefined)
    walkBody(body, options.limits ?? DEFAULT_SCAN_LIMITS, {
      text: (text, path, seam) => scan.inspect(text, path, seam),
      unscanned: (reason, path) => scan.unscannedAt(reason, path),
    });
  return scan.result(header.rejected);
}

const NO_DETECTORS: readonly CustomDetector[] = [];

/**
 * What one request's texts gave so far. A class, not closures over a handful of Sets: at a few
 * short texts per request the allocations were most of classification's cost.
 */
class RequestScan {
  readonly #custom: readonly CustomDetector[];
  readonly #tags: Set<string>;
  /** Built-in detectors that fired, as bits in DETECTORS order. */
  #found = 0;
  #fired: Set<string> | undefined;
  readonly #findings: Finding[] = [];
  readonly #unscanned: Unscanned[] = [];
  /** Where the current text is (a header's name or the body's path), and what already fired on it. */
  #where: string | readonly PathSegment[] = '';
  #seam = false;
  #reported = 0;
  #reportedCustom: Set<string> | undefined;

  constructor(headerTags: readonly string[], custom: readonly CustomDetector[]) {
    this.#tags = new Set(headerTags);
    this.#custom = custom;
  }

  /** Reads `text` in each of its forms; `where` is formatted only for a finding. */
  inspect(text: string, where: string | readonly PathSegment[], seam: boolean): void {
    this.#where = where;
    this.#seam = seam;
    this.#reported = 0;
    this.#reportedCustom?.clear();
    forEachForm(text, this.#visit, seam);
  }

  unscannedAt(reason: UnscannedReason, path: readonly PathSegment[]): void {
    this.#tags.add(UNSCANNED_TAG);
    if (this.#unscanned.length < MAX_REPORTED) this.#unscanned.push({ reason, path: formatPath(path) });
  }

  /** One form of the current text; a detector is reported once per text, in the first form it fired in. */
  readonly #visit = (form: string, via: readonly Decoding[]): void => {
    hits.clear();
    scanForm(form, hits);
    for (const d of hits) {
      const bit = 1 << DETECTORS.indexOf(d);
      if (this.#reported & bit) continue;
      this.#reported |= bit;
      this.#found |= bit;
      this.#tags.add(PII_TAG);
      this.#report(d, PII_TAG, via);
    }
    for (const detector of this.#custom) {
      if (this.#reportedCustom?.has(detector.name) || !detector.matches(form)) continue;
      (this.#reportedCustom ??= new Set()).add(detector.name);
      (this.#fired ??= new Set()).add(detector.name);
      this.#tags.add(detector.tag);
      this.#report(detector.name, detector.tag, via);
    }
  };

  #report(detector: string, tag: string, via: readonly Decoding[]): void {
    if (this.#findings.length >= MAX_REPORTED) return;
    const where = this.#where;
    const path = typeof where === 'string' ? where : formatPath(where);
    this.#findings.push(finding(detector, tag, path, via, this.#seam));
  }

  result(rejectedHeaderTags: string[]): Classification {
    const fired = this.#fired;
    return {
      tags: this.#tags.size === 0 ? [] : [...this.#tags].sort(),
      detectors: this.#found === 0 ? [] : DETECTORS.filter((_, i) => this.#found & (1 << i)),
      custom: fired === undefined ? [] : this.#custom.filter((d) => fired.has(d.name)).map((d) => d.name),
      findings: this.#findings,
      unscanned: this.#unscanned,
      rejectedHeaderTags,
    };
  }
}

/** The built-in detectors that fired on one form: one set for every scan (classification is synchronous). */
const hits = new Set<Detector>();

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
