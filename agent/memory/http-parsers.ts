// node:http keeps the parsers of closed connections for reuse, up to 1,000 (`parsers`, a FreeList
// in node's lib/_http_common.js), each with ~10 KB of native memory in glibc's main heap (heaptrack
// in `npm run soak`: 10.1 MB over 1,003 parsers 30 s after 1,000 concurrent streams; README "Soak").
// They are kept for the process's life: a burst of connections leaves its parsers behind. Dropping
// them when the agent turns quiet returns that memory; a later connection allocates a new parser,
// as any connection past the 1,000 kept does.

interface FreeList {
  list: { close?: () => void }[];
}

/** node's free list of HTTP parsers, when this Node.js has one where it is expected. */
function keptParsers(): FreeList | undefined {
  let common: { parsers?: unknown };
  try {
    common = process.getBuiltinModule('_http_common') as { parsers?: unknown };
  } catch {
    return undefined;
  }
  const parsers = common?.parsers as Partial<FreeList> | undefined;
  return parsers !== undefined && Array.isArray(parsers.list) ? (parsers as FreeList) : undefined;
}

/**
 * Closes the HTTP parsers node:http keeps for reuse beyond `keep`: their native halves are freed
 * at once (`close()`, as node does for a parser it does not keep). Returns how many were dropped
 * (0 when this Node.js keeps none where expected).
 */
export function dropKeptHttpParsers(keep = 0): number {
  const kept = keptParsers();
  if (kept === undefined || kept.list.length <= keep) return 0;
  const dropped = kept.list.splice(keep);
  for (const parser of dropped) parser.close?.();
  return dropped.length;
}
