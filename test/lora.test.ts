// LoRA affinity: vLLM's lora_requests_info read as residency (not activity), the adapter cost in
// the prediction, a request for adapter A preferring a pod running A, then a pod with room in its
// batch; the simulator serving adapters (vLLM's batch limit, the gauge, /v1/models); and overflow
// that maps an adapter only through a provider's explicit `models:` entry.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { PodPool } from '../agent/pool/pool.ts';
import { adapterCostMs, adapterFit, DEFAULT_LORA_COSTS, type LoraView } from '../agent/route/lora.ts';
import { decide } from '../agent/route/router.ts';
import { ADAPTERS } from '../agent/telemetry/adapters.ts';
import { loraStateOf } from '../agent/telemetry/lora.ts';
import { PodTelemetry } from '../agent/telemetry/pod-telemetry.ts';
import { parsePromText } from '../agent/telemetry/promtext.ts';
import type { LoraState, PodLoad } from '../agent/types.ts';
import { VirtualClock } from '../shared/sim/clock.ts';
import { SimEngine } from '../shared/sim/engine.ts';
import { renderMetrics } from '../shared/sim/metrics.ts';
import { startSim, type SimServer } from '../shared/sim/server.ts';
import { startOpenAIStandin, type OpenAIStandin } from './fixtures/openai-provider.ts';
import { poolOptions, routePod, routePolicy, routeRequest, STAY } from './helpers/route-fixtures.ts';
import { chatBody, MODEL, postJson, startStack, type Stack } from './helpers/stack.ts';

const FIXTURE = new URL('./fixtures/model-server-metrics/vllm-v1-lora.txt', import.meta.url);

const info = (running: string, waiting: string, at: number, maxLora = '4') => ({
  labels: { max_lora: maxLora, running_lora_adapters: running, waiting_lora_adapters: waiting },
  value: at,
});

describe("reading vLLM's lora_requests_info", () => {
  it('takes the newest series for running and waiting, and max_lora, from a real vLLM page', () => {
    const page = parsePromText(readFileSync(FIXTURE, 'utf8'), ADAPTERS.vllm.selector);
    const result = ADAPTERS.vllm.toLoad(page, 1);
    assert.ok(result.ok);
    assert.deepEqual(result.load.lora, {
      maxLora: 4,
      running: ['tweet-summary', 'sql-lora', 'french-chat'],
      waiting: ['sql-lora', 'tweet-summary', 'french-chat', 'legal-qa'],
      resident: ['tweet-summary', 'sql-lora', 'french-chat'],
    });
  });

  it('keeps an adapter resident after its requests finished (activity is not residency)', () => {
    const state = loraStateOf([info('a,b', '', 100), info('', '', 300), info('c', '', 200), info('d,e', '', 50)]);
    assert.deepEqual(state, { maxLora: 4, running: [], waiting: [], resident: ['c', 'a', 'b', 'd'] });
  });

  it('has no LoRA state without the gauge or with a max_lora that is not a positive integer', () => {
    assert.equal(loraStateOf([]), undefined);
    assert.equal(loraStateOf([info('a', '', 1, '0')]), undefined);
    assert.equal(loraStateOf([info('a', '', 1, 'many')]), undefined);
  });
});

describe('the adapter cost (pure)', () => {
  const view = (running: string[], resident: string[] = running, sentSince: string[] = []): LoraView => ({
    maxLora: 2,
    running,
    waiting: [],
    resident,
    sentSince,
  });
  const costs = { loadMs: 50, slotWaitMs: 2000 };

  it('is nothing for an adapter the batch runs, the load for a new one with room, a slot wait past max_lora', () => {
    assert.equal(adapterFit(view(['a']), 'a'), 'active');
    assert.equal(adapterCostMs(view(['a']), 'a', costs), 0);
    assert.equal(adapterFit(view(['a']), 'b'), 'free-slot');
    assert.equal(adapterCostMs(view(['a']), 'b', costs), 50);
    assert.equal(adapterCostMs(view(['a'], ['a', 'b']), 'b', costs), 0, 'still loaded: no load');
    assert.equal(adapterFit(view(['a', 'b']), 'c'), 'no-slot');
    assert.equal(adapterCostMs(view(['a', 'b']), 'c', costs), 2050);
  });

  it("counts what this agent sent since the pod's last report", () => {
    assert.equal(adapterFit(view([], [], ['a']), 'a'), 'active');
    assert.equal(adapterFit(view(['a'], ['a'], ['b']), 'c'), 'no-slot');
  });
});

describe('routing a request for an adapter', () => {
  const lora = (running: string[]): LoraState => ({ maxLora: 4, running, waiting: [], resident: running });
  const adapters = ['a', 'b', 'c', 'd', 'e'];

  function pool(loads: Record<string, { waiting: number; running: string[]; batch?: number }>) {
    let now = 1000;
    const p = new PodPool(poolOptions(() => now, { networkCostMs: 0 }));
    p.setLocalPods(
      Object.keys(loads).map((name) => routePod(name, { engine: 'vllm', models: ['m', ...adapters], adapters })),
    );
    for (const [name, l] of Object.entries(loads)) {
      const load: PodLoad = {
        at: now,
        engine: 'vllm',
        waiting: l.waiting,
        running: l.batch ?? l.running.length * 2,
        kvCache: 0.1,
        lora: lora(l.running),
      };
      const telemetry = new PodTelemetry();
      telemetry.record(load);
      p.recordLoad(`ns/${name}`, load, telemetry);
    }
    now += 10;
    return p;
  }
  const choose = (p: PodPool, model: string) => {
    const request = routeRequest({ model });
    const d = decide({
      request,
      policy: routePolicy({ sloTtftMs: 60_000, exclude: [] }),
      candidates: p.candidates(model),
      leave: STAY,
      rand: () => 0,
    });
    assert.equal(d.action, 'pod');
    return d.action === 'pod' ? d.chosen.candidate : undefined!;
  };

  it('prefers the pod running the adapter over one that must load it, at the same load', () => {
    const p = pool({
      other: { waiting: 1, running: ['b'], batch: 8 },
      'has-a': { waiting: 1, running: ['a'], batch: 8 },
    });
    assert.equal(choose(p, 'a').pod.name, 'has-a');
  });

  it('prefers the pod running the adapter, though its queue is longer, over one whose slots are all busy', () => {
    const p = pool({
      busy: { waiting: 0, running: ['b', 'c', 'd', 'e'] },
      'has-a': { waiting: 3, running: ['a', 'b', 'c', 'd'] },
    });
    assert.equal(choose(p, 'a').pod.name, 'has-a');
  });

  it('sends an adapter no pod runs to a pod with room in its batch, not to one whose slots are all busy', () => {
    const p = pool({ full: { waiting: 0, running: ['a', 'b', 'c', 'd'] }, roomy: { waiting: 3, running: ['a'] } });
    assert.equal(choose(p, 'e').pod.name, 'roomy');
  });

  it('keeps sending an adapter where it just sent it, before the pod reports it', () => {
    const p = pool({ x: { waiting: 0, running: ['a', 'b', 'c'] }, y: { waiting: 0, running: ['a', 'b', 'c'] } });
    const first = choose(p, 'e');
    p.begin(first, 200, 'chat', true, undefined, 'e');
    const other = p.candidates('e').find((c) => c.pod.uid !== first.pod.uid)!;
    assert.equal(other.adapterCostMs!('e'), DEFAULT_LORA_COSTS.loadMs, 'the other pod would load it');
    assert.equal(p.candidates('e').find((c) => c.pod.uid === first.pod.uid)!.adapterCostMs!('e'), 0);
  });

  it('adds nothing for the base model or on a pod without LoRA', () => {
    const p = pool({ x: { waiting: 0, running: ['a', 'b', 'c', 'd'] } });
    assert.equal(p.candidates('m')[0]!.adapterCostMs!('m'), 0);
  });
});

describe('the simulator serving adapters', () => {
  it('runs at most max_loras distinct adapters in one batch, the others waiting', () => {
    const clock = new VirtualClock();
    const engine = new SimEngine({ maxSeqs: 16, maxLoras: 2, loraLoadMs: 40, seed: 3 }, clock);
    for (const adapter of ['a', 'b', 'c', 'a']) engine.submit({ promptTokens: 100, maxTokens: 50, adapter });
    engine.advanceTo(300); // past the first step, which only `a` (alone when it began) was in
    const s = engine.snapshot();
    assert.equal(s.running, 3, 'a, b and the second a');
    assert.equal(s.waiting, 1, 'c waits for a slot');
    assert.deepEqual(s.lora?.running, ['a', 'b']);
    assert.deepEqual(s.lora?.waiting, ['c']);
    engine.runUntilIdle();
    assert.equal(engine.snapshot().lora?.loads, 3);
    // Its page, read by the agent: c took a slot once a or b drained.
    const page = renderMetrics(engine.snapshot(), { flavor: 'vllm', modelName: 'm', startedAt: 0 });
    assert.match(
      page,
      /^vllm:lora_requests_info\{max_lora="2",running_lora_adapters="a,b",waiting_lora_adapters="c"\} /m,
    );
    const load = ADAPTERS.vllm.toLoad(parsePromText(page, ADAPTERS.vllm.selector), 1);
    assert.ok(load.ok);
    assert.equal(load.load.lora?.maxLora, 2);
    assert.ok(load.load.lora?.resident.includes('c'));
  });

  describe('over HTTP', () => {
    let sim: SimServer;
    before(async () => {
      sim = await startSim({ models: ['llama-3-8b'], adapters: ['sql-lora'], maxLoras: 2, seed: 4 });
    });
    after(() => sim.close());

    it('lists adapters in /v1/models with the base model as parent, as vLLM does', async () => {
      const list = (await (await fetch(`${sim.url}/v1/models`)).json()) as {
        data: { id: string; parent: string | null }[];
      };
      assert.deepEqual(
        list.data.map((m) => [m.id, m.parent]),
        [
          ['llama-3-8b', null],
          ['sql-lora', 'llama-3-8b'],
        ],
      );
    });

    it('answers a request for the adapter and reports it in the gauge', async () => {
      const res = await postJson(`${sim.url}/v1/chat/completions`, { ...chatBody(), model: 'sql-lora' });
      assert.equal(res.status, 200);
      await res.json();
      const page = await (await fetch(`${sim.url}/metrics`)).text();
      assert.match(page, /running_lora_adapters="sql-lora"/);
    });
  });
});

describe('overflow of an adapter request', () => {
  let stack: Stack;
  let provider: OpenAIStandin;
  let sim: SimServer;

  before(async () => {
    provider = await startOpenAIStandin();
    sim = await startSim({ models: [MODEL], adapters: ['sql-lora', 'chat-lora'], maxLoras: 2, seed: 5 });
    stack = await startStack({
      pods: [],
      config: {
        pods: [
          {
            name: 'lora-0',
            namespace: 'inference',
            address: new URL(sim.url).host,
            engine: 'vllm',
            models: [MODEL],
            adapters: ['sql-lora', 'chat-lora'],
          },
        ],
        // The base model and one adapter are mapped; chat-lora is not, so it never leaves as the base model.
        providers: [
          {
            name: 'hosted',
            kind: 'openai',
            endpoint: provider.url,
            models: { [MODEL]: 'hosted-llama', 'sql-lora': 'hosted-sql-finetune' },
          },
        ],
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

  it("sends a mapped adapter as the provider's model named for it", async () => {
    const res = await postJson(`${stack.api}/v1/chat/completions`, { ...chatBody(), model: 'sql-lora' });
    assert.equal(res.status, 200);
    await res.text();
    assert.equal(res.headers.get('x-kinference-route'), 'overflow/hosted');
    assert.equal(provider.requests.at(-1)?.body.model, 'hosted-sql-finetune');
  });

  it('never sends an unmapped adapter to the base model: it stays and is answered 429', async () => {
    const before = provider.requests.length;
    const res = await postJson(`${stack.api}/v1/chat/completions`, { ...chatBody(), model: 'chat-lora' });
    await res.text();
    assert.equal(res.status, 429);
    assert.equal(provider.requests.length, before, 'the provider was never asked');
  });

  it('lists the adapters among the models', async () => {
    const list = (await (await fetch(`${stack.api}/v1/models`)).json()) as { data: { id: string }[] };
    const ids = list.data.map((m) => m.id);
    assert.ok(ids.includes('sql-lora') && ids.includes('chat-lora'), ids.join(','));
  });
});
