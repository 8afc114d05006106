// The sampling heap profiler's answer folded by allocation site, for the allocation benches
// (bench/decide-alloc.ts per decision, bench/scrape/run-scraper.ts per scrape).
import type { Session } from 'node:inspector/promises';

interface ProfileNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: ProfileNode[];
}

/** Stops `session`'s sampling and returns the bytes sampled in all and by site (`function dir/file:line`), largest first. */
export async function allocationBySite(session: Session): Promise<{ total: number; sites: [string, number][] }> {
  const { profile } = (await session.post('HeapProfiler.stopSampling')) as unknown as {
    profile: { head: ProfileNode };
  };
  const bySite = new Map<string, number>();
  let total = 0;
  const walk = (node: ProfileNode) => {
    if (node.selfSize > 0) {
      const f = node.callFrame;
      const key = `${f.functionName || '(anonymous)'} ${f.url.split('/').slice(-2).join('/')}:${f.lineNumber + 1}`;
      bySite.set(key, (bySite.get(key) ?? 0) + node.selfSize);
      total += node.selfSize;
    }
    for (const child of node.children) walk(child);
  };
  walk(profile.head);
  return { total, sites: [...bySite].sort((a, b) => b[1] - a[1]) };
}
