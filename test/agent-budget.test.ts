// Overflow budgets on the request path, through a running agent and a recording provider:
// reserve before the provider is asked, give back on fallback, settle from the reported usage,
// and a tenant with no budget left waits for a pod, then gets 429 with when the window refills.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { refusedPort, startOpenAIStandin, type OpenAIStandin } from './fixtures/openai-provider.ts';
import { estimatePromptTokens } from '../agent/predict/tokens.ts';
import { chatBody, MODEL, postJson, startStack, type Stack } from './helpers/stack.ts';

const TOKEN_BUDGET = 60;
const BODY = chatBody('What is the capital of France?', { max_tokens: 10 });

/** Starts only when the rest of the test fits in the current minute window (a refill mid-test would double the budget). */
async function awayFromMinuteEdge(): Promise<void> {
  const intoMinute = Date.now() % 60_000;
  if (intoMinute > 50_000) await new Promise((r) => setTimeout(r, 60_000 - intoMinute + 100));
}

describe('overflow budgets through a running agent', () => {
  let stack: Stack;
  let provider: OpenAIStandin;

  before(async () => {
    provider = await startOpenAIStandin();
    const down = await refusedPort();
    const providerOf = (name: string, url: string) => ({
      name,
      kind: 'openai',
      endpoint: url,
      models: { [MODEL]: `${name}-llama` },
      timeout: '1s',
    });
    // No pod meets a 1 ms SLO: every request of these tenants is an overflow candidate.
    const capped = (namespace: string, providers: string[], limits: unknown[]) => ({
      metadata: { name: 'capped', namespace },
      spec: { slo: { ttft: '1ms' }, exclude: [], overflow: { providers, budget: { limits } }, wait: { max: '200ms' } },
    });
    stack = await startStack({
      config: {
        providers: [providerOf('first', provider.url), providerOf('down', `http://127.0.0.1:${down}/v1`)],
        policies: [
          capped('tokens', ['first'], [{ window: 'minute', tokens: TOKEN_BUDGET }]),
          capped('fallback', ['down', 'first'], [{ window: 'hour', requests: 2 }]),
        ],
      },
    });
  });
  after(async () => {
    await stack.close();
    await provider.close();
  });

  const send = (tenant: string) =>
    postJson(`${stack.api}/v1/chat/completions`, BODY, { 'x-kinference-tenant': tenant });

  it('admits overflow while the budget lasts, counts the usage the provider reports, then answers 429 with the refill time', async () => {
    await awayFromMinuteEdge();
    const before = provider.requests.length;
    let reported = 0;
    let answered = 0;
    let refusal: Response | undefined;
    for (let i = 0; i < 20 && !refusal; i++) {
      const res = await send('tokens');
      if (res.status === 200) {
        assert.equal(res.headers.get('x-kinference-route'), 'overflow/first');
        const body = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
        reported += body.usage.prompt_tokens + body.usage.completion_tokens;
        answered++;
      } else refusal = res;
    }
    assert.ok(refusal, 'the budget ran out within 20 requests');
    assert.equal(refusal.status, 429);
    const error = (await refusal.json()) as { error: { code: string; message: string } };
    assert.equal(error.error.code, 'overflow_budget_exhausted');
    assert.match(error.error.message, /minute overflow budget/);
    assert.equal(refusal.headers.get('x-kinference-budget'), 'minute');
    const retryAfter = Number(refusal.headers.get('retry-after'));
    assert.ok(retryAfter >= 1 && retryAfter <= 60, `Retry-After ${retryAfter}s is within the minute window`);
    assert.ok(answered >= 1, 'overflow went while the budget lasted');
    assert.equal(provider.requests.length - before, answered, 'the refused request never reached the provider');
    assert.ok(reported <= TOKEN_BUDGET, `reported usage ${reported} within ${TOKEN_BUDGET}`);
    // Settled from usage, not left at the estimate: each answer gives back what it did not use,
    // so more requests fit than estimates alone would allow (the stand-in reports 9 tokens each).
    const estimate = estimatePromptTokens(BODY) + 10;
    const settledFits = Math.floor((TOKEN_BUDGET - estimate) / 9) + 1;
    assert.ok(settledFits > Math.floor(TOKEN_BUDGET / estimate), 'the check can tell settling from not settling');
    assert.equal(answered, settledFits);

    // Visible: the gauges and /explain show the same usage and that nothing of it remains for one more.
    const metrics = await (await fetch(`${stack.admin}/metrics`)).text();
    const used = Number(
      /kinference_overflow_budget_used\{tenant="tokens",window="minute",unit="tokens"\} (\d+)/.exec(metrics)?.[1],
    );
    assert.equal(used, reported);
    assert.match(
      metrics,
      new RegExp(
        `kinference_overflow_budget_remaining\\{tenant="tokens",window="minute",unit="tokens"\\} ${TOKEN_BUDGET - reported}\n`,
      ),
    );
    assert.match(metrics, /kinference_overflow_budget_refusals_total\{tenant="tokens",reason="exhausted"\} 1\n/);
    const explained = (await (
      await fetch(`${stack.admin}/explain?model=${MODEL}&tenant=tokens&namespace=tokens&promptTokens=10`)
    ).json()) as {
      budget: { scope: string; usedTokens: number; remainingTokens: number }[];
      leave: { allowed: boolean; budget?: { scope: string; reason: string } };
    };
    assert.deepEqual(
      explained.budget.map((b) => [b.scope, b.usedTokens, b.remainingTokens]),
      [['minute', reported, TOKEN_BUDGET - reported]],
    );
  });

  it('gives the budget back when a provider fails and the next one takes the request', async () => {
    const before = provider.requests.length;
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await send('fallback');
      statuses.push(res.status);
      await res.arrayBuffer();
    }
    // Two requests per hour: the refused 'down' attempts held nothing once they failed.
    assert.deepEqual(statuses, [200, 200, 429]);
    assert.equal(provider.requests.length - before, 2);
  });
});
