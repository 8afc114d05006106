// Normalisation before detection: the same number or address however it is typed or escaped.
// The model reads the characters, not the bytes, so the detectors must read what the model reads:
// escapes undone, digits of every script as ASCII, invisible characters gone. Pure.

// Every default-ignorable code point (zero-width space and joiners, direction marks pasted from
// RTL text, invisible operators, variation selectors, tag characters, fillers): a renderer shows
// nothing for them, so they can sit between any two characters of a value.
const IGNORABLE = /\p{Default_Ignorable_Code_Point}/gu;
// Unicode dashes and hyphens become '-', so `4111‒1111…` groups.
const DASHES = /[\u2010-\u2015\u2212\ufe58\ufe63]/g;
// Decimal digits of any script (Arabic-Indic, Devanagari, Bengali, Thai, …): NFKC folds only the
// full-width and mathematical ones, not a card number typed on an Arabic keyboard.
const NON_ASCII_DIGIT = /(?![0-9])\p{Nd}/gu;
const ANY_DIGIT = /^\p{Nd}$/u;

/** What a normalisation changed, for the evidence (`explain` names the decoding, never the text). */
export interface Normalised {
  text: string;
  /** JSON escapes were undone (one level, or two where a string holds JSON that holds escapes). */
  unescaped: boolean;
  /** Unicode forms were folded (NFKC, digits of other scripts, invisible characters, dashes). */
  folded: boolean;
}

/**
 * ASCII text without a backslash is returned as is (the common case costs one scan). Otherwise
 * JSON escapes are undone, then NFKC folds full-width digits and `＠`, ideographic spaces and the
 * like to ASCII, every decimal digit becomes ASCII and default-ignorable code points are dropped.
 */
export function normalise(text: string): string {
  return normaliseWithEvidence(text).text;
}

export function normaliseWithEvidence(text: string): Normalised {
  const unescaped = text.indexOf('\\') === -1 ? text : unescapeJsonTwice(text);
  if (isAscii(unescaped)) return { text: unescaped, unescaped: unescaped !== text, folded: false };
  const folded = foldUnicode(unescaped);
  return { text: folded, unescaped: unescaped !== text, folded: folded !== unescaped };
}

/** The Unicode half of `normalise`, for text that is already unescaped (decoded spans). */
export function foldUnicode(s: string): string {
  if (isAscii(s)) return s;
  return s
    .replace(IGNORABLE, '')
    .normalize('NFKC')
    .replace(IGNORABLE, '')
    .replace(NON_ASCII_DIGIT, asciiDigit)
    .replace(DASHES, '-');
}

/**
 * UTF-8 length equals UTF-16 length only for ASCII: native, several times cheaper than a regex
 * scan on long text; short strings (ids, roles, names) are cheaper to check in place.
 */
function isAscii(s: string): boolean {
  if (s.length > 64) return Buffer.byteLength(s, 'utf8') === s.length;
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 127) return false;
  return true;
}

// Unicode encodes each script's digits 0–9 as one contiguous run (some runs follow each other,
// like the mathematical ones), so a digit's value is its distance from its run's start, mod 10.
const digitValues = new Map<number, string>();
function asciiDigit(ch: string): string {
  const c = ch.codePointAt(0)!;
  let value = digitValues.get(c);
  if (value === undefined) {
    let start = c;
    while (ANY_DIGIT.test(String.fromCodePoint(start - 1))) start--;
    value = String((c - start) % 10);
    digitValues.set(c, value);
  }
  return value;
}

// Tool arguments and other JSON-in-a-string carry `\n` and `\u0040` as escapes; a tool result
// that embeds JSON in a string carries `\\u0040`, one level deeper. The model reads them as the
// characters, so the detectors must too. Unknown escapes (`\d` in a regex) are left as they are.
const JSON_ESCAPE = /\\(?:u([0-9a-fA-F]{4})|(["\\/bfnrt]))/g;
const SIMPLE: Record<string, string> = { '"': '"', '\\': '\\', '/': '/', b: ' ', f: ' ', n: ' ', r: ' ', t: ' ' };
function unescapeJson(text: string): string {
  return text.replace(JSON_ESCAPE, (_, hex: string | undefined, simple: string | undefined) =>
    hex ? String.fromCharCode(parseInt(hex, 16)) : SIMPLE[simple!],
  );
}
function unescapeJsonTwice(text: string): string {
  const once = unescapeJson(text);
  return once.indexOf('\\') === -1 ? once : unescapeJson(once);
}
