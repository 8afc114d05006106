// Normalisation before detection: the same number or address however it is typed or escaped.

// Invisible characters a copy-paste (or an evasion) puts between digits: zero-width space, joiners,
// word joiner, BOM, soft hyphen. Unicode dashes and hyphens become '-', so `4111‒1111…` groups.
const INVISIBLE = /[\u00ad\u180e\u200b-\u200d\u2060\ufeff]/g;
const DASHES = /[\u2010-\u2015\u2212\ufe58\ufe63]/g;

/**
 * ASCII text is returned as is (the common case costs one regex test). Otherwise NFKC folds
 * full-width digits and `＠`, ideographic spaces and the like to ASCII; invisibles are dropped.
 */
export function normalise(text: string): string {
  const s = text.indexOf('\\') === -1 ? text : unescapeJson(text);
  if (isAscii(s)) return s;
  return s.normalize('NFKC').replace(INVISIBLE, '').replace(DASHES, '-');
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

// Tool arguments and other JSON-in-a-string carry `\n` and `\u0040` as escapes: the model reads
// them as the characters, so the detectors must too.
const JSON_ESCAPE = /\\(?:u([0-9a-fA-F]{4})|[nrt])/g;
function unescapeJson(text: string): string {
  return text.replace(JSON_ESCAPE, (_, hex: string | undefined) =>
    hex ? String.fromCharCode(parseInt(hex, 16)) : ' ',
  );
}
