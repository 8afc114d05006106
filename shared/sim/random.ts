// Seedable randomness, so a simulated run replays exactly for a fixed seed.

export type Rand = () => number;

/** mulberry32: a tiny 32-bit PRNG, good enough for jitter and length sampling. Returns [0, 1). */
export function mulberry32(seed: number): Rand {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** FNV-1a over UTF-16 code units: a stable seed derived from a text. */
export function hashString(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** `bytes` random bytes as lowercase hex (ids like vLLM's random_uuid().hex). */
export function randomHex(rand: Rand, bytes: number): string {
  let out = '';
  for (let i = 0; i < bytes; i++)
    out += Math.floor(rand() * 256)
      .toString(16)
      .padStart(2, '0');
  return out;
}
