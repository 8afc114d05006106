// E-mail addresses, the only detector that starts at `@` rather than a digit. Pure.
import { SPACE, DASH, DOT, isAsciiAlnum, isWordChar } from './chars.ts';

const LOCAL_EXTRA = new Set([...'._%+-'].map((ch) => ch.charCodeAt(0)));
/** TLD-shaped file extensions: `icon@2x.png` is an asset, not an address. */
const FILE_EXTENSIONS = new Set([
  'png',
  'jpg',
  'jpeg',
  'gif',
  'svg',
  'webp',
  'bmp',
  'ico',
  'tif',
  'tiff',
  'pdf',
  'js',
  'mjs',
  'ts',
  'tsx',
  'jsx',
  'css',
  'json',
  'yaml',
  'yml',
  'lock',
  'txt',
  'html',
  'htm',
  'map',
]);

/** Internationalised addresses (RFC 6531) put letters of any script on both sides of the `@`. */
function isLabelChar(c: number): boolean {
  return isAsciiAlnum(c) || (c >= 128 && isWordChar(c));
}
const TLD = /^(?:\p{L}{2,24}|xn--[a-z0-9-]{2,59})$/iu;

export function hasEmail(s: string): boolean {
  const n = s.length;
  for (let at = s.indexOf('@'); at !== -1; at = s.indexOf('@', at + 1)) {
    let l = at;
    while (l > 0) {
      const c = s.charCodeAt(l - 1);
      if (isLabelChar(c) || LOCAL_EXTRA.has(c)) l--;
      else break;
    }
    while (l < at && s.charCodeAt(l) === DOT) l++;
    if (l === at) continue;
    // Domain: labels of letters, digits and `-` joined by single dots; the last one all letters (or punycode).
    let r = at + 1;
    let lastDot = -1;
    while (r < n) {
      const c = s.charCodeAt(r);
      if (isLabelChar(c) || (c === DASH && r > at + 1 && s.charCodeAt(r - 1) !== DOT)) r++;
      else if (
        c === DOT &&
        r > at + 1 &&
        s.charCodeAt(r - 1) !== DOT &&
        r + 1 < n &&
        isLabelChar(s.charCodeAt(r + 1))
      ) {
        lastDot = r;
        r++;
      } else break;
    }
    if (lastDot === -1) continue;
    const tld = s.slice(lastDot + 1, r);
    if (!TLD.test(tld)) continue;
    if (FILE_EXTENSIONS.has(tld.toLowerCase()) || /^[0-9.]+x$/i.test(s.slice(at + 1, s.indexOf('.', at + 1)))) continue;
    const next = r < n ? s.charCodeAt(r) : SPACE;
    // `git@github.com:org/repo.git` is a remote, not a mailbox.
    if (next === 64 || next === 95 || (next === 58 && r + 1 < n && isAsciiAlnum(s.charCodeAt(r + 1)))) continue;
    return true;
  }
  return false;
}
