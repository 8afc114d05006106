// Waiting in line for a pod, with the wait's metrics and its time on the request's record.
import type { WaitingRoom } from '../../admission/waiting.ts';
import type { Priority } from '../../budget/limits.ts';
import type { RequestRecord } from '../observability/evidence.ts';
import type { RequestPathDeps } from './path-deps.ts';

/**
 * Waits (at most `maxMs`) in line for a pod: 'turn' when the pool changed and this request is
 * the first in order that `canAct`; 'full' at once when the bound on waiting requests is
 * reached and it may displace nobody; 'shed' when a higher class, or a tenant under its share, took its place. Throws when the
 * client leaves. Adds the wait to the record.
 */
export async function waitInLine(
  deps: Pick<RequestPathDeps, 'metrics' | 'now'>,
  waiting: WaitingRoom,
  who: { tenant: string; priority: Priority; maxMs: number },
  canAct: () => boolean,
  signal: AbortSignal,
  record: RequestRecord,
): Promise<'turn' | 'timeout' | 'full' | 'shed'> {
  const waitStarted = deps.now();
  let woke: Awaited<ReturnType<WaitingRoom['wait']>>;
  try {
    woke = await waiting.wait(
      { tenant: who.tenant, priority: who.priority, deadline: waitStarted + who.maxMs },
      canAct,
      signal,
    );
  } catch (error) {
    deps.metrics.waits.inc({ outcome: 'cancelled' });
    throw error;
  } finally {
    record.waitedMs = Math.round(record.waitedMs + deps.now() - waitStarted);
  }
  if (woke === 'full' || woke === 'shed') deps.metrics.waits.inc({ outcome: woke });
  return woke;
}
