// The LoRA adapters a pod's server lists in /v1/models (vLLM and SGLang: entries whose `parent` is
// the base model), read at a low rate: an adapter nobody declared becomes routable to that pod,
// the agent's own model list says its base, and overflow still never sends it as the base model.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { adaptersOfModelList, LISTING_LIMITS } from '../agent/telemetry/adapter-listing.ts';
import type { Explanation } from '../agent/server/admin/explain.ts';
import { startSim, type SimServer } from '../shared/sim/server.ts';
import { startOpenAIStandin, type OpenAIStandin } from './fixtures/openai-provider.ts';
import { chatBody, MODEL, postJson, startStack, waitFor, type Stack } from './helpers/stack.ts';

describe('reading a model list for adapters (pure)', () => {
  it("takes vLLM's adapter cards (parent = base model) and leaves the base model", () => {
    // The shape of vLLM's show_available_models: a base card, then one per LoRA adapter.
    const list = {
      object: 'list',
      data: [
        {
          id: 'meta-llama/Llama-3.1-8B-Instruct',
          object: 'model',
          created: 1733300000,
          owned_by: 'vllm',
          root: '/models/llama',
          parent: null,
          max_model_len: 8192,
          permission: [{ id: 'modelperm-1', object: 'model_permission' }],
        },
        {
          id: 'sql-lora',
          object: 'model',
          created: 1733300000,
          owned_by: 'vllm',
          root: '/adapters/sql',
          parent: 'meta-llama/Llama-3.1-8B-Instruct',
          max_model_len: null,
          permission: [],
        },
        { id: 'fr-lora', object: 'model', root: '/adapters/fr', parent: 'meta-llama/Llama-3.1-8B-Instruct' },
      ],
    };
    assert.deepEqual(adaptersOfModelList(list), [
      { name: 'sql-lora', base: 'meta-llama/Llama-3.1-8B-Instruct' },
      { name: 'fr-lora', base: 'meta-llama/Llama-3.1-8B-Instruct' },
    ]);
  });

  it('ignores what is not an adapter card, and stops at its bounds', () => {
    assert.deepEqual(adaptersOfModelList({ data: 'no' }), []);
    assert.deepEqual(adaptersOfModelList(null), []);
    assert.deepEqual(
      adaptersOfModelList({
        data: [
          { id: 'a', parent: 'a' },
          { id: 'b', parent: '' },
          { id: 7, parent: 'm' },
          { id: 'x'.repeat(254), parent: 'm' },
          null,
        ],
      }),
      [],
    );
    const many = { data: Array.from({ length: 5000 }, (_, i) => ({ id: `a${i}`, parent: 'm' })) };
    assert.equal(adaptersOfModelList(many).length, LISTING_LIMITS.adapters);
  });
});

describe('adapters a pod lists but nobody declared', () => {
  let stack: Stack;
  let sim: SimServer;
  let provider: OpenAIStandin;
  before(async () => {
    provider = await startOpenAIStandin();
    sim = await startSim({ models: [MODEL], adapters: ['sql-lora', 'chat-lora'], maxLoras: 2, seed: 9 });
    stack = await startStack({
      pods: [],
      config: {
        // Declared with its base model only: the adapters come from the pod's /v1/models.
        pods: [
          { name: 'lora-0', namespace: 'inference', address: new URL(sim.url).host, engine: 'vllm', models: [MODEL] },
        ],
        limits: { adapterListInterval: '200ms' },
        providers: [{ name: 'hosted', kind: 'openai', endpoint: provider.url, models: { [MODEL]: 'hosted-llama' } }],
        policies: [
          {
            metadata: { name: 'leave', namespace: '*' },
            spec: { slo: { ttft: '1ms' }, exclude: [], overflow: { providers: ['hosted'] }, wait: { max: '50ms' } },
          },
        ],
      },
    });
  });
  after(async () => {
    await stack?.close();
    await sim?.close();
    await provider?.close();
  });

  it("lists them among the agent's models with their base, and routes them to the pod", async () => {
    const models = async () =>
      ((await (await fetch(`${stack.api}/v1/models`)).json()) as { data: { id: string; parent?: string }[] }).data;
    await waitFor(async () => (await models()).some((m) => m.id === 'sql-lora'), 5000, 'sql-lora listed');
    const listed = await models();
    assert.equal(listed.find((m) => m.id === 'sql-lora')?.parent, MODEL);
    assert.equal(listed.find((m) => m.id === MODEL)?.parent, undefined);
    const explain = (await (await fetch(`${stack.admin}/explain?model=sql-lora`)).json()) as Explanation;
    // A candidate for it (dropped here only because no pod meets this policy's 1 ms SLO).
    assert.deepEqual(
      [...explain.candidates, ...explain.dropped].map((c) => c.pod),
      ['local/lora-0'],
    );
  });

  it('never overflows a listed adapter as its base model', async () => {
    const before = provider.requests.length;
    const res = await postJson(`${stack.api}/v1/chat/completions`, { ...chatBody(), model: 'chat-lora' });
    await res.text();
    assert.equal(res.status, 429);
    assert.equal(provider.requests.length, before, 'the provider was never asked');
    const base = await postJson(`${stack.api}/v1/chat/completions`, chatBody());
    await base.text();
    assert.equal(base.headers.get('x-kinference-route'), 'overflow/hosted');
    assert.equal(provider.requests.at(-1)?.body.model, 'hosted-llama');
  });
});
