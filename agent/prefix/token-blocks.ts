// Token-exact block keys: the same chaining an engine's prefix cache uses, over token ids. Pure.
//
// vLLM names a full block by hash(parent block's hash, the block's token ids, extra keys such as
// the LoRA adapter), so a block matches only when every token before it matches too. Its hash
// values themselves depend on its --prefix-caching-hash-algo and a seed (random per process for
// xxhash), so they cannot be recomputed reliably outside the engine. What can be recomputed is the
// chain: the BlockStored events carry each block's token ids, block size, parent and adapter, so
// the index keys every block by this function over the same inputs, and a prompt tokenized with
// the model's own tokenizer gets the same keys exactly when the engine would find its blocks.

/** A block key: two 32-bit lanes folded into a 52-bit safe integer (collisions negligible at 10⁶ blocks). */
export type BlockKey = number;

/** The root a chain starts from: different adapters never share a block, as in vLLM's extra keys. */
export function chainRoot(lora: string | undefined): BlockKey {
  if (lora === undefined || lora === '') return 0;
  let a = 0x811c9dc5;
  let b = 0x9747b28c;
  for (let i = 0; i < lora.length; i++) {
    const c = lora.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
    b ^= b >>> 13;
  }
  return fold(a, b) || 1;
}

/** The key of the block of `tokens[start, start + size)` whose parent block has key `parent`. */
export function blockKey(parent: BlockKey, tokens: ArrayLike<number>, start: number, size: number): BlockKey {
  // The parent's 52 bits seed both lanes, so the key depends on the whole chain before it.
  let a = Math.imul((parent % 0x100000000) ^ 0x811c9dc5, 0x01000193);
  let b = Math.imul(Math.floor(parent / 0x100000000) ^ 0x9747b28c, 0x5bd1e995);
  for (let i = start; i < start + size; i++) {
    const t = tokens[i] >>> 0;
    a = Math.imul(a ^ t, 0x01000193);
    b = Math.imul(b ^ t, 0x5bd1e995);
    b ^= b >>> 13;
  }
  return fold(a, b);
}

/** Keys of the full blocks of `tokens` (a partial last block is never cached), at most `maxBlocks`. */
export function tokenBlockKeys(
  tokens: ArrayLike<number>,
  blockSize: number,
  lora?: string,
  maxBlocks = Infinity,
): BlockKey[] {
  const full = Math.min(maxBlocks, Math.floor(tokens.length / blockSize));
  const out = new Array<BlockKey>(full);
  let parent = chainRoot(lora);
  for (let i = 0; i < full; i++) {
    parent = blockKey(parent, tokens, i * blockSize, blockSize);
    out[i] = parent;
  }
  return out;
}

function fold(a: number, b: number): BlockKey {
  return (a >>> 0) * 0x100000 + ((b >>> 0) & 0xfffff);
}
