// How the admin listener reads a request target (path and query) from node:http. It keeps what
// the listener answered when it ran on Hono (docs/api.md, "Admin listener"), so probes, scrapers and
// scripts see the same answers: dot segments resolved and odd characters escaped as the URL
// parser does, the path's escapes decoded (but not an escaped `/`, `?`, `%`, …), query values with
// `+` as a space and their escapes decoded (an invalid escape kept as written), the first of a
// repeated key, no fragment, and a target the URL parser cannot read (or a Host it reads as another host)
// refused with a bare 400.

/** The request target as the admin routes read it; undefined: refuse with a bare 400. */
export interface AdminTarget {
  /** Decoded path, without the query. */
  path: string;
  /** A query parameter's decoded value ('' when given without `=`), undefined when absent. */
  query(key: string): string | undefined;
}

// Targets whose every character the URL parser keeps as it is (so it has nothing to change but
// dot segments), and Hosts that are plainly a lowercase name or address with a port.
const PLAIN_TARGET = /^\/[!#$&-;=?-[\]_a-z~]*$/;
const DOT_SEGMENT = /\/\.\.?(?:[/?#]|$)/;
const PLAIN_HOST = /^[a-z0-9._-]+(?::(?:[1-5]\d{3,4}|[6-9]\d{3}))?$/;

export function readTarget(
  raw: string | undefined,
  host: string | undefined,
  fallbackHost: string,
): AdminTarget | undefined {
  const url = normalized(raw ?? '', host || fallbackHost);
  if (url === undefined) return undefined;
  const start = url.indexOf('/', url.indexOf(':') + 3);
  let end = start;
  while (end < url.length && url[end] !== '?' && url[end] !== '#') end++;
  const rawPath = url.slice(start, end);
  const path = rawPath.includes('%') ? decodedPath(rawPath) : rawPath;
  const hash = url.indexOf('#', start);
  const bare = hash < 0 ? url : url.slice(0, hash);
  const queryAt = bare.indexOf('?', start);
  const search = queryAt < 0 ? '' : bare.slice(queryAt + 1);
  return { path, query: (key) => queryValue(search, key) };
}

/** The absolute URL the routes read, as the URL parser would give it; undefined when refused. */
function normalized(target: string, host: string): string | undefined {
  try {
    if (target.startsWith('http://') || target.startsWith('https://')) {
      if (backslashInPath(target)) return undefined;
      return new URL(target).href;
    }
    const url = `http://${host}${target}`;
    if (!PLAIN_HOST.test(host)) {
      if (backslashInPath(target)) return undefined;
      const parsed = new URL(url);
      const name = host.replace(/:\d+$/, '').toLowerCase();
      if (parsed.hostname.length !== host.length && parsed.hostname !== name) return undefined;
      return parsed.href;
    }
    if (target === '') return `${url}/`;
    if (target[0] !== '/') return undefined;
    if (PLAIN_TARGET.test(target) && !DOT_SEGMENT.test(target)) return url;
    if (backslashInPath(target)) return undefined;
    return new URL(url).href;
  } catch {
    return undefined;
  }
}

function backslashInPath(target: string): boolean {
  const backslash = target.indexOf('\\');
  if (backslash < 0) return false;
  const query = target.indexOf('?');
  return query < 0 || backslash < query;
}

/** Decodes the whole text, or (when that fails) each run of escapes that decodes, keeping the rest as written. */
function decodeRuns(text: string, decode: (s: string) => string): string {
  try {
    return decode(text);
  } catch {
    return text.replace(/(?:%[0-9A-Fa-f]{2})+/g, (run) => {
      try {
        return decode(run);
      } catch {
        return run;
      }
    });
  }
}

/** decodeURI, except that an escaped `%` stays escaped: a decoded path never holds a `%` not written as one. */
const decodePathText = (text: string) => decodeURI(text.replaceAll('%25', '%2525'));

/**
 * The path's escapes decoded. A `%` that starts no escape is kept as written, unless the URL parser
 * would then read the decoded path as another path (an escaped dot segment behind it, say): then it
 * is read as an escaped `%`, so no path means one thing here and another to the parser.
 */
function decodedPath(raw: string): string {
  const decoded = decodeRuns(raw, decodePathText);
  if (!/%(?![0-9A-Fa-f]{2})/.test(raw)) return decoded;
  const reread = new URL('http://localhost');
  reread.pathname = decoded.replace(/[\\\t\n\r]/g, encodeURIComponent);
  if (decodeRuns(reread.pathname, decodePathText) === decoded) return decoded;
  return decodeRuns(raw.replace(/%(?![0-9A-Fa-f]{2})/g, '%25'), decodePathText);
}

function decodeValue(value: string): string {
  if (!/[%+]/.test(value)) return value;
  const spaced = value.replaceAll('+', ' ');
  return spaced.includes('%') ? decodeRuns(spaced, decodeURIComponent) : spaced;
}

/** The value of the first pair whose (decoded) key is `key`. */
function queryValue(search: string, key: string): string | undefined {
  if (search === '') return undefined;
  for (const pair of search.split('&')) {
    const eq = pair.indexOf('=');
    if (decodeValue(eq < 0 ? pair : pair.slice(0, eq)) === key) return eq < 0 ? '' : decodeValue(pair.slice(eq + 1));
  }
  return undefined;
}
