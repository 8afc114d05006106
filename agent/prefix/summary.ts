// What a node's pods hold, in a few hundred bytes another node can read: a Bloom filter of a
// sample of each pod's most recently stored block keys. Pure.
//
// A key is sampled when it is divisible by SAMPLE_EVERY (a content-defined 1-in-32 sample, so
// sender and reader agree without knowing block depths): a 6,000-token context has ~12 sampled
// blocks. The summary holds the pod's newest SUMMARY_KEYS sampled keys (about 4,096 blocks = 65k
// tokens of its hottest prefixes) in SUMMARY_BYTES. A reader walks the prompt's keys from the end
// and takes the deepest sampled key in the filter as the pod's cached prefix. Its error: it
// under-counts by up to 31 blocks (what lies past the last sampled block), and a false positive
// of the filter (≈0.5% per probe at 128 keys in 2,048 bits, 3 hashes) can claim a prefix.
import type { BlockKey } from './token-blocks.ts';

export const SAMPLE_EVERY = 32;
export const SUMMARY_BYTES = 256;
export const SUMMARY_KEYS = 128;
const HASHES = 3;

export function isSampled(key: BlockKey): boolean {
  return key % SAMPLE_EVERY === 0;
}

/** The filter of `keys` (at most SUMMARY_KEYS are expected; more only raise the false positives). */
export function buildSummary(keys: Iterable<BlockKey>): Uint8Array {
  const bits = new Uint8Array(SUMMARY_BYTES);
  for (const key of keys) for (const bit of positions(key)) bits[bit >>> 3] |= 1 << (bit & 7);
  return bits;
}

export function summaryHas(summary: Uint8Array, key: BlockKey): boolean {
  if (summary.length !== SUMMARY_BYTES) return false;
  for (const bit of positions(key)) if ((summary[bit >>> 3] & (1 << (bit & 7))) === 0) return false;
  return true;
}

/** Tokens of the prompt whose block keys are `keys` the summarized pod is taken to hold. */
export function summaryCachedTokens(summary: Uint8Array, keys: readonly BlockKey[], blockSize: number): number {
  for (let i = keys.length - 1; i >= 0; i--) {
    if (isSampled(keys[i]) && summaryHas(summary, keys[i])) return (i + 1) * blockSize;
  }
  return 0;
}

function positions(key: BlockKey): number[] {
  // The key is already a hash: its two halves give the probes (Kirsch–Mitzenmacher double hashing).
  const m = SUMMARY_BYTES * 8;
  const a = (Math.floor(key / SAMPLE_EVERY) % 0x100000000) >>> 0;
  const b = (Math.floor(key / 0x100000000) * 0x9e3779b1) >>> 0 || 1;
  const out: number[] = [];
  for (let i = 0; i < HASHES; i++) out.push(((a + Math.imul(i, b)) >>> 0) % m);
  return out;
}
