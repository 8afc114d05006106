// Routing with the prefix cache in mind, end to end: real agent, real simulated vLLM pods over
// HTTP. A conversation's next turn goes back to the pod that holds its history when loads are
// equal, and elsewhere when that pod's queue costs more than the prefill the cache would save.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Explanation } from '../agent/server/admin/explain.ts';
import { MODEL, postJson, startStack, waitFor, type Stack } from './helpers/stack.ts';

/** A long, conversation-specific history (~6,000 tokens at 4 characters a token): the prefill it
 *  saves dwarfs what a busy test machine does to measured TTFTs. */
function history(conversation: number): string {
  let text = '';
  for (let i = 0; text.length < 24_000; i++) text += `conversation ${conversation} sentence ${i} about the topic. `;
  return text;
}

const turn1 = (c: number) => [{ role: 'user', content: history(c) }];
const turn2 = (c: number) => [
  ...turn1(c),
  { role: 'assistant', content: 'A short answer.' },
  { role: 'user', content: 'And then?' },
];

describe('a conversation and the prefix cache', () => {
  let stack: Stack;
  before(async () => {
    // No exclusion rule and a loose SLO: only the prediction keeps requests off the busy pod.
    stack = await startStack({
      pods: [{ maxSeqs: 2 }, { maxSeqs: 2 }],
      config: {
        // Scrapes far enough apart that a CPU-starved test machine doesn't make pods look stale.
        scrapeInterval: '250ms',
        policies: [{ metadata: { name: 'default', namespace: '*' }, spec: { slo: { ttft: '60s' }, exclude: [] } }],
      },
    });
  });
  after(() => stack.close());

  const send = async (messages: unknown[]) => {
    const response = await postJson(`${stack.api}/v1/chat/completions`, {
      model: MODEL,
      messages,
      max_tokens: 2,
      stream: true,
    });
    await response.text();
    assert.equal(response.status, 200);
    return response.headers.get('x-kinference-route') ?? '';
  };
  /** The decision for these messages, once both pods are candidates (fresh scrapes). */
  const explain = async (messages: unknown[]) => {
    let e: Explanation | undefined;
    await waitFor(
      async () => {
        const response = await postJson(`${stack.admin}/explain`, { model: MODEL, messages, stream: true });
        e = (await response.json()) as Explanation;
        return e.candidates.length === 2;
      },
      5000,
      'both pods to be candidates',
    );
    return e!;
  };

  it('sends turn 2 to the pod that served turn 1 when loads are equal', async () => {
    for (let c = 0; c < 4; c++) {
      const first = await send(turn1(c));
      // Equal loads: both idle between requests (max_tokens 2, answered before the next).
      const e = await explain(turn2(c));
      const cached = Object.fromEntries(e.candidates.map((x) => [x.pod, x.expectedCachedTokens]));
      assert.ok(cached[first] >= 5900, JSON.stringify(cached)); // ~6,000-token history, whole blocks
      for (const [pod, tokens] of Object.entries(cached)) if (pod !== first) assert.equal(tokens, 0);
      assert.equal(await send(turn2(c)), first, `conversation ${c}: ${JSON.stringify(e.candidates)}`);
    }
    // Four turn-2s sent where ~6,000 tokens each were expected cached: the agent counts them.
    const metrics = await (await fetch(`${stack.admin}/metrics`)).text();
    const expected = Number(/^kinference_prefix_tokens_total\{kind="expected_cached"\} (\d+)$/m.exec(metrics)?.[1]);
    assert.ok(
      expected >= 4 * 5900,
      metrics
        .split('\n')
        .filter((l) => l.includes('prefix'))
        .join('\n'),
    );
  });

  it('sends turn 2 elsewhere when the pod holding turn 1 is saturated', async () => {
    const first = await send(turn1(10));
    const busy = first === 'local/pod-0' ? 0 : 1;
    // Outside traffic fills that pod: 2 running, 28 waiting, for as long as the test needs.
    const held = Array.from({ length: 30 }, () =>
      stack.sims[busy].engine.submit({ promptTokens: 100, maxTokens: 100_000 }),
    );
    try {
      await waitFor(
        async () => {
          const e = await explain(turn2(10));
          return e.candidates.find((x) => x.pod === first)?.queued === 28;
        },
        3000,
        `the agent to see ${first}'s queue`,
      );
      const e = await explain(turn2(10));
      const holder = e.candidates.find((x) => x.pod === first)!;
      const other = e.candidates.find((x) => x.pod !== first)!;
      assert.ok(holder.expectedCachedTokens >= 5900);
      // The holder saves the prefill, but its queue costs more: the prediction says so.
      assert.ok(holder.predictedTtftMs > other.predictedTtftMs, JSON.stringify(e.candidates));
      assert.notEqual(await send(turn2(10)), first);
    } finally {
      for (const h of held) if (h.accepted) h.seq.abort();
    }
  });
});
