// Wiring for precise prefix routing (agent/prefix/): kept apart from kv-feed.ts so that importing
// it loads neither the ZMQ binding nor a tokenizer.
import type { AgentSettings } from '../config/load.ts';
import type { PodPool } from '../pool/pool.ts';
import type { Pod } from '../types.ts';

/**
 * Precise prefix routing: subscribers to the KV events of the local pods that publish them, and
 * the configured models' tokenizers. The ZMQ binding and the tokenizers load only once a pod
 * publishes events or a tokenizer is configured: an agent without either pays nothing for them.
 */
export async function kvEventsFor(
  settings: AgentSettings,
  pool: Pick<PodPool, 'attachPreciseIndex'>,
  log: (message: string) => void,
): Promise<{
  setPods(pods: readonly Pod[]): void;
  stop(): Promise<void>;
  promptTokenIds?: (model: string, body: Record<string, unknown>) => number[] | undefined;
}> {
  type Feeds = import('./kv-feed.ts').KvEventFeeds;
  let feeds: Feeds | undefined;
  let loading: Promise<Feeds> | undefined;
  let latest: readonly Pod[] = [];
  const load = () =>
    (loading ??= import('./kv-feed.ts').then(({ KvEventFeeds }) => {
      feeds = new KvEventFeeds({
        maxBlocksPerPod: settings.limits.preciseBlocksPerPod,
        replayTimeoutMs: settings.limits.kvReplayTimeoutMs,
        maxHeldBatches: settings.limits.kvMaxHeldBatches,
        log,
      });
      const f = feeds;
      pool.attachPreciseIndex(f.index, (uid) => f.synced(uid));
      f.setPods(latest);
      return f;
    }));
  const tokenizers =
    Object.keys(settings.tokenizers).length > 0
      ? (await import('./kv-feed.ts')).loadTokenizers(settings.tokenizers, log)
      : undefined;
  return {
    setPods(pods) {
      latest = pods;
      if (feeds) feeds.setPods(pods);
      else if (pods.some((p) => p.kvEvents)) void load();
    },
    async stop() {
      await (feeds ?? (loading ? await loading : undefined))?.stop();
    },
    ...(tokenizers?.size
      ? {
          promptTokenIds: (model: string, body: Record<string, unknown>) => {
            // Only worth the tokenizing when some pod's events can answer; otherwise the approximate index does.
            if (!feeds) return undefined;
            return tokenizers.get(model)?.promptTokens(body);
          },
        }
      : {}),
  };
}
