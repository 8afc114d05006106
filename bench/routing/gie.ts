// The Gateway API Inference Extension's endpoint picker (EPP), default scheduling profile, as a
// bench strategy. Reimplemented from its behaviour as read in kubernetes-sigs/gateway-api-inference-extension
// (v1.0–v1.4, pkg/epp) and, after the EPP moved out in mid-2026, llm-d/llm-d-inference-scheduler
// (checked 2026-12-04: pkg/epp/config/loader/defaults.go; pkg/epp/framework/plugins/requestcontrol/
// dataproducer/approximateprefix/{types,hashing,indexer,plugin}.go; scheduling/scorer/{prefix,
// queuedepth,kvcacheutilization}; picker/maxscore; datalayer/extractor/metrics/factories.go), so
// that it is neither stronger nor weaker than what a user of GIE gets by default:
//
//   - scorers, each in [0, 1]: queue = (maxWaiting − waiting) / (maxWaiting − minWaiting) over the
//     candidates (1 for all when equal); KV = 1 − KV-cache usage; prefix = matched blocks / the
//     prompt's blocks. Weights 2, 2, 3 (the default profile's); the weighted sum ranks.
//   - picker: max score, ties broken at random (it shuffles, then sorts stably).
//   - metrics: waiting requests and KV usage as scraped, refreshed every 50 ms (its default).
//   - prefix index ("approximate prefix cache"): the prompt's text (for chat, its messages as JSON)
//     cut into blocks of blockSizeTokens (16, or the pod's block_size) × 4 *characters*, hashes
//     chained from the model name, at most maxPrefixBlocksToMatch = 256 blocks (longer prompts are
//     cut: 4k tokens' worth of text), and a trailing partial block hashed too. After each decision
//     (PreRequest: on routing, never on the engine's confirmation) the chosen pod's LRU gets every
//     block, first to last. Its capacity ("autoTune", on by default) is the pod's num_gpu_blocks
//     from vllm:cache_config_info; lruCapacityPerServer (31,250) only when a pod reports none. An
//     entry stands for 16 tokens, but a prompt past 4k tokens records only its first 256 entries
//     while the engine stores all its blocks: the LRU holds more prompts than the pod does (a 7k
//     prompt: 1.75×). Nothing else ages it: it never sees the pod's own cache counters or other
//     clients' traffic. A lookup walks the prompt's blocks from the first and stops at the first
//     block no pod holds; each pod scores the blocks of that run it holds.
//   - `GIE_V1_0`: the profile llm-d benchmarked its precise scorer against ("estimated-scheduling"
//     in its b2b-saas report, said to match the then-default): weights 1, 1, 1 and a fixed LRU of
//     lruCapacityPerServer = 31,250 entries per pod whatever the pod holds (v1.0 had no autoTune).
//
// Not modelled: flow control (a feature gate, off by default) and the saturation detector (it only
// sheds "sheddable" requests, and none are here), LoRA affinity (no adapters here), and the model
// name and cache salt in the first hash (one model here).
import { LRUCache } from 'lru-cache';
import { BLOCK_TOKENS, CHARS_PER_TOKEN, promptBlocks } from '../../agent/prefix/blocks.ts';
import type { PodLoad } from '../../agent/types.ts';
import type { BenchStrategy, StrategyFactory } from './strategy-types.ts';
import { promptTextOf } from './workload.ts';

export const GIE_WEIGHTS = { queue: 2, kvCache: 2, prefix: 3 } as const;

/** A variant of the profile: its scorer weights and its prefix LRU's capacity per pod. */
export interface GieSettings {
  weights: { queue: number; kvCache: number; prefix: number };
  /** 'autoTune': the pod's KV blocks (the current default); a number: that many entries whatever the pod holds. */
  lruCapacity: 'autoTune' | number;
}
export const GIE_DEFAULT: GieSettings = { weights: GIE_WEIGHTS, lruCapacity: 'autoTune' };
/** v1.0's defaults, as llm-d's b2b-saas report configured its approximate baseline. */
export const GIE_V1_0: GieSettings = { weights: { queue: 1, kvCache: 1, prefix: 1 }, lruCapacity: 31_250 };
/** The EPP's default metrics refresh interval (ms). */
export const GIE_REFRESH_MS = 50;
/** maxPrefixBlocksToMatch's default. */
const GIE_MAX_PREFIX_BLOCKS = 256;
/** lruCapacityPerServer's default, used only until a pod reports its KV blocks. */
const GIE_DEFAULT_LRU_CAPACITY = 31_250;

/**
 * The prompt's block hashes as the EPP makes them: full blocks of `blockTokens` × 4 characters, at
 * most 256 (the text is cut there), and the trailing partial block. Empty below one block.
 */
export function gieBlockHashes(text: string, blockTokens = BLOCK_TOKENS): number[] {
  const blockChars = blockTokens * CHARS_PER_TOKEN;
  if (text.length < blockChars) return [];
  const input = text.slice(0, GIE_MAX_PREFIX_BLOCKS * blockChars);
  const hashes = promptBlocks(input, blockChars);
  // A hash chained over a partial block names the whole text before its end: so does hashing the
  // whole text as one block.
  if (input.length % blockChars !== 0) hashes.push(promptBlocks(input, input.length, 1)[0]);
  return hashes;
}

/** The EPP's approximate prefix index: per-pod LRUs of block hashes and a hash → pods map. */
export class GiePrefixIndex {
  readonly #pods = new Map<string, LRUCache<number, true>>();
  readonly #holders = new Map<number, Set<string>>();

  /** `hashes` were sent to `pod`; its LRU is sized by the pod's KV blocks when first seen. */
  add(pod: string, hashes: readonly number[], capacityBlocks: number | undefined): void {
    let lru = this.#pods.get(pod);
    if (!lru) {
      lru = new LRUCache<number, true>({
        max: capacityBlocks && capacityBlocks > 0 ? Math.floor(capacityBlocks) : GIE_DEFAULT_LRU_CAPACITY,
        dispose: (_v, hash, reason) => {
          if (reason === 'set') return;
          const holders = this.#holders.get(hash);
          holders?.delete(pod);
          if (holders?.size === 0) this.#holders.delete(hash);
        },
      });
      this.#pods.set(pod, lru);
    }
    for (const hash of hashes) {
      lru.set(hash, true);
      let holders = this.#holders.get(hash);
      if (!holders) this.#holders.set(hash, (holders = new Set()));
      holders.add(pod);
    }
  }

  /** Blocks each pod holds of the leading run of `hashes` that some pod holds. */
  match(hashes: readonly number[]): Map<string, number> {
    const matched = new Map<string, number>();
    for (const hash of hashes) {
      const holders = this.#holders.get(hash);
      if (!holders || holders.size === 0) break;
      for (const pod of holders) matched.set(pod, (matched.get(pod) ?? 0) + 1);
    }
    return matched;
  }
}

const kvUsage = (load: PodLoad | undefined) => (Number.isFinite(load?.kvCache) ? (load!.kvCache as number) : 0);
const clamp01 = (x: number) => Math.min(1, Math.max(0, x));

/** The default profile; `withPrefix` false leaves out the prefix-cache scorer (queue + KV only). */
export function gieProfile(withPrefix: boolean, settings: GieSettings = GIE_DEFAULT): StrategyFactory {
  const w = settings.weights;
  return (ctx): BenchStrategy => {
    const index = new GiePrefixIndex();
    return {
      scrapeIntervalMs: GIE_REFRESH_MS,
      choose: (a) => {
        const hashes = withPrefix && a.tokens ? gieBlockHashes(promptTextOf(a.tokens)) : [];
        const matched = index.match(hashes);
        const waiting = ctx.pods.map((p) => p.lastLoad?.waiting ?? 0);
        const minQ = Math.min(...waiting);
        const maxQ = Math.max(...waiting);
        const scores = ctx.pods.map((p, i) => {
          const queue = maxQ === minQ ? 1 : (maxQ - waiting[i]) / (maxQ - minQ);
          const prefix = hashes.length > 0 ? (matched.get(p.pod.uid) ?? 0) / hashes.length : 0;
          return (
            w.queue * clamp01(queue) +
            w.kvCache * clamp01(1 - kvUsage(p.lastLoad)) +
            (withPrefix ? w.prefix * clamp01(prefix) : 0)
          );
        });
        const best = Math.max(...scores);
        const ties = scores.flatMap((s, i) => (s === best ? [i] : []));
        const pod = ties[Math.floor(ctx.rand() * ties.length)];
        const chosen = ctx.pods[pod];
        if (hashes.length > 0) {
          const capacity = chosen.lastLoad?.kvCapacityTokens;
          const lru =
            settings.lruCapacity !== 'autoTune'
              ? settings.lruCapacity
              : capacity !== undefined
                ? capacity / BLOCK_TOKENS
                : undefined;
          index.add(chosen.pod.uid, hashes, lru);
        }
        return { pod };
      },
    };
  };
}
