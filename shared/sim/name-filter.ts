// `/metrics?name[]=…` as prometheus_client answers it (vLLM, SGLang), so the agent's filtered scrapes
// are tested against the real behaviour. Pure: a query string and a page in, a page out.
//
// What prometheus_client does (read in prometheus/client_python at d0b497f, v0.25.0):
//   - exposition.py `_bake_output`: when the query has `name[]`, the page is rendered from
//     `registry.restricted_registry(params['name[]'])`; the query is read with `urllib.parse.parse_qs`
//     (fields split on `&`, `+` and `%XX` decoded, blank values dropped: `?name[]=` alone is no filter).
//     `make_asgi_app` and `make_wsgi_app` both do this, for any path under their mount.
//   - registry.py `RestrictedRegistry.collect`: a collector is asked only when a requested name is one
//     it registered (`_get_names`: the family name plus its type's suffixes: counter `_total`,
//     `_created`; histogram `_bucket`, `_sum`, `_count`, `_created`; …), then metrics_core.py
//     `_restricted_metric` keeps the samples whose *sample* name is requested, and a family left
//     with none is not written. So the names are sample names (`vllm:time_to_first_token_seconds_sum`,
//     `vllm:prompt_tokens_total`): asking for a histogram's family name gets nothing, and a name
//     nobody has is ignored (no error; no match at all is an empty 200 page).
//   - A `MultiProcessCollector` registers no names (it has no `describe`), so a registry made of it
//     answers every filtered request with an empty page, unless the registry was built with
//     `support_collectors_without_names=True` (added in v0.25.0, opt-in; docs/content/multiprocess).
//     SGLang builds `CollectorRegistry()` plain (python/sglang/srt/utils/common.py
//     `add_prometheus_middleware`), as does vLLM with several API servers (vllm/v1/metrics/prometheus.py
//     `get_prometheus_registry`).
// The written page keeps each remaining family's HELP/TYPE lines and, in the 0.0.4 format, writes a
// counter's or histogram's `_created` samples as a separate gauge family, which is simply another
// block here: restricting the rendered text block by block gives the same bytes.

/** The `name[]` values of a query string (without `?`) as `parse_qs` reads them; undefined when there are none. */
export function requestedNames(query: string): Set<string> | undefined {
  let names: Set<string> | undefined;
  for (const field of query.split('&')) {
    const eq = field.indexOf('=');
    if (eq < 0) continue; // `parse_qs` drops a field without `=` (blank values are not kept)
    const value = field.slice(eq + 1);
    if (value.length === 0) continue;
    if (unquotePlus(field.slice(0, eq)) !== 'name[]') continue;
    (names ??= new Set()).add(unquotePlus(value));
  }
  return names;
}

/** Python's `unquote(s.replace('+', ' '))`: `%XX` as bytes, decoded as UTF-8 with replacement; malformed escapes kept. */
function unquotePlus(text: string): string {
  const plain = text.replace(/\+/g, ' ');
  if (!plain.includes('%')) return plain;
  const bytes: number[] = [];
  for (let i = 0; i < plain.length; i++) {
    const hex = plain.slice(i + 1, i + 3);
    if (plain[i] === '%' && /^[0-9a-fA-F]{2}$/.test(hex)) {
      bytes.push(parseInt(hex, 16));
      i += 2;
    } else bytes.push(...Buffer.from(plain[i], 'utf8'));
  }
  return new TextDecoder('utf-8').decode(Uint8Array.from(bytes));
}

const META = /^# (HELP|TYPE|UNIT) (\S+)/;

/**
 * The page prometheus_client writes for a restricted registry, from the page it writes unrestricted
 * (0.0.4 text or OpenMetrics): only samples whose name is in `names`, each family's HELP/TYPE/UNIT
 * lines only when one of its samples is left, `# EOF` kept.
 */
export function restrictPage(page: string, names: ReadonlySet<string>): string {
  const out: string[] = [];
  let meta: string[] = [];
  let metaName = '';
  let kept: string[] = [];
  let inSamples = false;
  const flush = () => {
    if (kept.length > 0) out.push(...meta, ...kept);
    meta = [];
    kept = [];
    inSamples = false;
  };
  const lines = page.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  for (const line of lines) {
    const m = META.exec(line);
    if (m !== null) {
      if (inSamples || (meta.length > 0 && m[2] !== metaName)) flush();
      meta.push(line);
      metaName = m[2];
    } else if (line === '# EOF') {
      flush();
      out.push(line);
    } else if (line.startsWith('#') || line.trim() === '') {
      meta.push(line);
    } else {
      inSamples = true;
      const end = line.search(/[{ \t]/);
      if (names.has(end < 0 ? line : line.slice(0, end))) kept.push(line);
    }
  }
  flush();
  return out.length === 0 ? '' : `${out.join('\n')}\n`;
}

/**
 * How a prometheus_client server answers a filtered request: `honoured` (a registry of named
 * collectors: vLLM with one API server) or `empty` (a plain registry around a MultiProcessCollector:
 * SGLang, vLLM with several API servers).
 */
export type NameFilter = 'honoured' | 'empty';

/** The body for a request whose query is `query`, given the unrestricted page. */
export function answerNameFilter(page: string, query: string, filter: NameFilter): string {
  const names = requestedNames(query);
  if (names === undefined) return page;
  if (filter === 'empty') return page.includes('\n# EOF') || page.startsWith('# EOF') ? '# EOF\n' : '';
  return restrictPage(page, names);
}
