// A parsed metrics page and what to read from it: the selector that says which samples the parser
// keeps (promtext.ts), and the page the adapters query. Pure data and lookups.

export type Labels = Readonly<Record<string, string>>;

export interface Series {
  readonly labels: Labels;
  readonly value: number;
  /** As written: integer ms in the Prometheus format, seconds in OpenMetrics. Rarely present. */
  readonly timestamp?: number;
}

export type MetricType =
  'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped' | 'unknown' | 'info' | 'stateset' | 'gaugehistogram';

/** Label subset that must match exactly, or a predicate. */
export type LabelMatch = Readonly<Record<string, string>> | ((labels: Labels) => boolean);

export interface Diagnostic {
  /** 1-based line number. */
  line: number;
  reason: string;
}

export interface HistogramTotals {
  sum: number;
  count: number;
  /** Cumulative counts by upper bound, ascending; only when `_bucket` samples were selected. */
  buckets?: { le: number; count: number }[];
}

const SUFFIXES = ['_bucket', '_sum', '_count', '_total', '_created', '_info', '_gcount', '_gsum'];

/** Strings grouped by length, so a name in the page is compared in place without slicing it. */
class ByLength {
  readonly #table: (string[] | undefined)[] = [];

  add(name: string): void {
    const bucket = (this.#table[name.length] ??= []);
    if (!bucket.includes(name)) bucket.push(name);
  }

  /** The stored string equal to `text[start, end)`, if any. */
  find(text: string, start: number, end: number): string | undefined {
    const bucket = this.#table[end - start];
    if (bucket === undefined) return undefined;
    // Indexed loops here and below: no iterator object, whichever tier runs the code.
    for (let k = 0; k < bucket.length; k++) if (text.startsWith(bucket[k], start)) return bucket[k];
    return undefined;
  }

  /**
   * Whether a stored string equals the ASCII bytes `bytes[start, end)`. Compared from the end:
   * names of one family share their start.
   */
  hasBytes(bytes: Uint8Array, start: number, end: number): boolean {
    const bucket = this.#table[end - start];
    if (bucket === undefined) return false;
    for (let k = 0; k < bucket.length; k++) {
      const name = bucket[k];
      let i = name.length - 1;
      while (i >= 0 && name.charCodeAt(i) === bytes[start + i]) i--;
      if (i < 0) return true;
    }
    return false;
  }

  *[Symbol.iterator](): IterableIterator<string> {
    for (const bucket of this.#table) if (bucket) yield* bucket;
  }
}

/**
 * Which sample names to read. Names are sample names as they appear on the line
 * (`vllm:time_to_first_token_seconds_sum`, `vllm:prompt_tokens_total`), so one selector works for
 * the Prometheus and OpenMetrics variants alike. Prefixes select every name that starts with them.
 * `labels`, when given, are the only label names kept on the selected series (the others are
 * still checked, never made into strings): an adapter that sums a gauge over its series needs
 * none of them, and building label objects was most of the cost of a wanted line.
 */
export class MetricSelector {
  readonly #names = new ByLength();
  readonly #prefixes: readonly string[];
  /** Family names (suffix stripped) whose TYPE lines are worth recording. */
  readonly #families = new ByLength();
  /** The label names kept; undefined keeps every label. */
  readonly #labels: ByLength | undefined;

  constructor(names: Iterable<string>, prefixes: Iterable<string> = [], labels?: Iterable<string>) {
    this.#prefixes = [...new Set(prefixes)];
    if (labels !== undefined) {
      this.#labels = new ByLength();
      for (const label of labels) this.#labels.add(label);
    }
    for (const name of names) {
      this.#names.add(name);
      this.#families.add(name);
      for (const suffix of SUFFIXES) {
        if (name.endsWith(suffix)) this.#families.add(name.slice(0, -suffix.length));
      }
    }
  }

  /** Every sample on the page. */
  static everything(): MetricSelector {
    return new MetricSelector([], ['']);
  }

  /** The union of several selectors (e.g. every engine's, for detection). */
  static union(...selectors: MetricSelector[]): MetricSelector {
    const everyLabel = selectors.some((s) => s.#labels === undefined);
    return new MetricSelector(
      selectors.flatMap((s) => [...s.#names]),
      selectors.flatMap((s) => s.#prefixes),
      everyLabel ? undefined : selectors.flatMap((s) => [...s.#labels!]),
    );
  }

  names(): string[] {
    return [...this.#names];
  }

  /** Whether every label of a selected series is kept. */
  get keepsEveryLabel(): boolean {
    return this.#labels === undefined;
  }

  /**
   * The kept label name equal to `text[start, end)` (the selector's own string), or undefined.
   * Only when `keepsEveryLabel` is false.
   */
  labelAt(text: string, start: number, end: number): string | undefined {
    return this.#labels?.find(text, start, end);
  }

  wants(name: string): boolean {
    return this.nameAt(name, 0, name.length) !== undefined;
  }

  /**
   * The wanted name equal to `text[start, end)`, or undefined. Rejecting costs no allocation, and
   * a wanted exact name comes back as the selector's own string, so pages share it.
   */
  nameAt(text: string, start: number, end: number): string | undefined {
    const known = this.#names.find(text, start, end);
    if (known !== undefined) return known;
    const prefixes = this.#prefixes;
    for (let k = 0; k < prefixes.length; k++) {
      if (prefixes[k].length <= end - start && text.startsWith(prefixes[k], start)) return text.slice(start, end);
    }
    return undefined;
  }

  /** Whether the name in the page's bytes `bytes[start, end)` is wanted: `nameAt` without making a string. */
  wantsNameBytes(bytes: Uint8Array, start: number, end: number): boolean {
    return this.#names.hasBytes(bytes, start, end) || this.#wantsPrefixBytes(bytes, start, end);
  }

  #wantsPrefixBytes(bytes: Uint8Array, start: number, end: number): boolean {
    const prefixes = this.#prefixes;
    for (let k = 0; k < prefixes.length; k++) {
      const prefix = prefixes[k];
      if (prefix.length > end - start) continue;
      let i = 0;
      while (i < prefix.length && prefix.charCodeAt(i) === bytes[start + i]) i++;
      if (i === prefix.length) return true;
    }
    return false;
  }

  /** `familyAt` for the page's bytes `bytes[start, end)`, without making a string. */
  wantsFamilyBytes(bytes: Uint8Array, start: number, end: number): boolean {
    return this.#families.hasBytes(bytes, start, end) || this.#wantsPrefixBytes(bytes, start, end);
  }

  /**
   * The family at `text[start, end)` if its TYPE line is worth keeping, or undefined: like
   * `nameAt`, a wanted family comes back as the selector's own string.
   */
  familyAt(text: string, start: number, end: number): string | undefined {
    const known = this.#families.find(text, start, end);
    if (known !== undefined) return known;
    const prefixes = this.#prefixes;
    for (let k = 0; k < prefixes.length; k++) {
      if (prefixes[k].length <= end - start && text.startsWith(prefixes[k], start)) return text.slice(start, end);
    }
    return undefined;
  }
}

const NONE: readonly Series[] = Object.freeze([]);

/** A parsed page: the selected series by sample name, plus what went wrong reading it. */
export class MetricPage {
  readonly #samples: ReadonlyMap<string, readonly Series[]>;
  readonly #types: ReadonlyMap<string, MetricType>;
  /** Malformed lines (of those read: unwanted lines are only checked up to their name). */
  readonly errors: number;
  /** The first few errors, for logs. */
  readonly diagnostics: readonly Diagnostic[];
  readonly lines: number;
  /** An OpenMetrics `# EOF` was seen. */
  readonly eof: boolean;

  constructor(
    samples: ReadonlyMap<string, readonly Series[]>,
    types: ReadonlyMap<string, MetricType>,
    report: { errors: number; diagnostics: readonly Diagnostic[]; lines: number; eof: boolean },
  ) {
    this.#samples = samples;
    this.#types = types;
    this.errors = report.errors;
    this.diagnostics = report.diagnostics;
    this.lines = report.lines;
    this.eof = report.eof;
  }

  names(): IterableIterator<string> {
    return this.#samples.keys();
  }

  has(name: string): boolean {
    return this.#samples.has(name);
  }

  /** TYPE of a family (`vllm:time_to_first_token_seconds`), when it was declared and selected. */
  type(family: string): MetricType | undefined {
    return this.#types.get(family);
  }

  series(name: string, where?: LabelMatch): readonly Series[] {
    const all = this.#samples.get(name) ?? NONE;
    return where === undefined ? all : all.filter((s) => labelsMatch(s.labels, where));
  }

  first(name: string, where?: LabelMatch): Series | undefined {
    const all = this.#samples.get(name) ?? NONE;
    for (let k = 0; k < all.length; k++) if (where === undefined || labelsMatch(all[k].labels, where)) return all[k];
    return undefined;
  }

  /** Sum over matching series; undefined when none match (absent is not zero). */
  sum(name: string, where?: LabelMatch): number | undefined {
    let total: number | undefined;
    const all = this.#samples.get(name) ?? NONE;
    for (let k = 0; k < all.length; k++) {
      const s = all[k];
      if (where === undefined || labelsMatch(s.labels, where)) total = (total ?? 0) + s.value;
    }
    return total;
  }

  max(name: string, where?: LabelMatch): number | undefined {
    let best: number | undefined;
    const all = this.#samples.get(name) ?? NONE;
    for (let k = 0; k < all.length; k++) {
      const s = all[k];
      if ((where === undefined || labelsMatch(s.labels, where)) && (best === undefined || s.value > best))
        best = s.value;
    }
    return best;
  }

  mean(name: string, where?: LabelMatch): number | undefined {
    let total = 0;
    let n = 0;
    const all = this.#samples.get(name) ?? NONE;
    for (let k = 0; k < all.length; k++) {
      const s = all[k];
      if (where === undefined || labelsMatch(s.labels, where)) {
        total += s.value;
        n++;
      }
    }
    return n === 0 ? undefined : total / n;
  }

  /**
   * A histogram's (or summary's) `_sum` and `_count` summed over matching series, e.g. across
   * vLLM's `engine` label. Undefined unless both were selected and present.
   */
  histogram(family: string, where?: LabelMatch): HistogramTotals | undefined {
    const sum = this.sum(`${family}_sum`, where);
    const count = this.sum(`${family}_count`, where);
    if (sum === undefined || count === undefined) return undefined;
    const bucketSeries = this.series(`${family}_bucket`, where);
    if (bucketSeries.length === 0) return { sum, count };
    const byLe = new Map<number, number>();
    for (const s of bucketSeries) {
      const le = parseFloatToken(s.labels.le ?? '');
      if (le !== undefined) byLe.set(le, (byLe.get(le) ?? 0) + s.value);
    }
    const buckets = [...byLe].sort((a, b) => a[0] - b[0]).map(([le, n]) => ({ le, count: n }));
    return { sum, count, buckets };
  }
}

export function labelsMatch(labels: Labels, where: LabelMatch): boolean {
  if (typeof where === 'function') return where(labels);
  for (const key in where) if (labels[key] !== where[key]) return false;
  return true;
}

/** Go float syntax as Prometheus writes it; undefined when it is not a number. */
export function parseFloatToken(token: string): number | undefined {
  if (token.length === 0) return undefined;
  const n = Number(token);
  if (!Number.isNaN(n)) {
    // Number() accepts things Go does not (hex integers, binary, octal); no exporter writes them.
    return n;
  }
  switch (token.toLowerCase()) {
    case 'nan':
    case '+nan':
    case '-nan':
      return NaN;
    case 'inf':
    case '+inf':
    case 'infinity':
    case '+infinity':
      return Infinity;
    case '-inf':
    case '-infinity':
      return -Infinity;
    default:
      return undefined;
  }
}
