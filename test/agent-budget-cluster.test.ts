// One tenant's overflow budget enforced across three agents on loopback, its counters carried by
// the agents' gossip (agent/budget/exchange.ts in Payload.budget) to a recording provider: the
// tenant overflows through all three at once and the provider's reported usage stays within the
// budget; a restarted agent (a new origin) neither resets the tenant's usage nor admits before it
// has heard the cluster; after the window, overflow resumes. The agents share one wall clock the
// test can move to the next minute (the production clock, offset), so the test need not wait for it.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gossipIdentities, peerKeysOf } from './helpers/gossip-keys.ts';
import { startOpenAIStandin, type OpenAIStandin } from './fixtures/openai-provider.ts';
import { estimatePromptTokens } from '../agent/predict/tokens.ts';
import { freeUdpPort } from './helpers/process.ts';
import { chatBody, MODEL, postJson, startStack, waitFor, type Stack } from './helpers/stack.ts';

const BUDGET = 240;
const AGENTS = 3;
const WORKERS_PER_AGENT = 3;
const BODY = chatBody('What is the capital of France?', { max_tokens: 10 });
const EXHAUSTED = /has used \d+ tokens and \d+ requests of its minute overflow budget/;

interface LedgerState {
  origin: string;
  synced: boolean;
  counters: number;
}

describe('an overflow budget shared by three agents over gossip', () => {
  let dir: string;
  let provider: OpenAIStandin;
  const stacks: Stack[] = [];
  let ports: number[];
  // Every agent's clock: the real one, moved on by `offset` when the test ends the window.
  let offset = 0;
  const now = () => Date.now() + offset;
  const ids = gossipIdentities('node-0', 'node-1', 'node-2');

  const start = (i: number) =>
    startStack({
      node: `node-${i}`,
      now,
      config: {
        listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0', gossip: `127.0.0.1:${ports[i]}` },
        peers: ports.filter((_, j) => j !== i).map((p) => `127.0.0.1:${p}`),
        gossip: {
          key: { file: join(dir, 'gossip.key') },
          interval: '100ms',
          ttl: '1500ms',
          identity: ids[`node-${i}`].identity,
          peerKeys: peerKeysOf(ids),
        },
        // An agent that has not heard the cluster admits nothing for this long: longer than any
        // start-up on a loaded machine, so "not yet heard" can only mean "refused".
        limits: { budgetWarmup: '30s' },
        providers: [{ name: 'hosted', kind: 'openai', endpoint: provider.url, models: { [MODEL]: 'hosted-llama' } }],
        // No pod meets a 1 ms SLO: every request of this tenant is an overflow candidate.
        policies: [
          {
            metadata: { name: 'batch', namespace: 'batch' },
            spec: {
              slo: { ttft: '1ms' },
              exclude: [],
              overflow: { providers: ['hosted'], budget: { limits: [{ window: 'minute', tokens: BUDGET }] } },
              wait: { max: '100ms' },
            },
          },
        ],
      },
    });

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kinference-budget-'));
    writeFileSync(join(dir, 'gossip.key'), 'test-gossip-key-0123456789abcdef');
    provider = await startOpenAIStandin();
    ports = await Promise.all(Array.from({ length: AGENTS }, () => freeUdpPort()));
    // 2 s into a minute: the burst has the rest of it (the window ends only when the test moves the clock).
    offset = Math.ceil(Date.now() / 60_000) * 60_000 + 2000 - Date.now();
    stacks.push(...(await Promise.all(Array.from({ length: AGENTS }, (_, i) => start(i)))));
  });
  after(async () => {
    await Promise.all(stacks.map((s) => s.close()));
    await provider.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const send = (stack: Stack) => postJson(`${stack.api}/v1/chat/completions`, BODY, { 'x-kinference-tenant': 'batch' });
  const ledger = async (stack: Stack) =>
    ((await (await fetch(`${stack.admin}/debug/state`)).json()) as { budget: LedgerState }).budget;
  const used = async (stack: Stack) =>
    (
      (await (await fetch(`${stack.admin}/explain?model=${MODEL}&tenant=batch&namespace=batch`)).json()) as {
        budget: { usedTokens: number }[];
      }
    ).budget[0].usedTokens;
  /** Tokens the provider reported for the answers it gave (prompt + completion). */
  const reported = async (res: Response) => {
    const body = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
    return body.usage.prompt_tokens + body.usage.completion_tokens;
  };

  let spent = 0;

  it('one tenant overflowing through all three agents at once stays within its budget, and every agent sees the same usage', async () => {
    await waitFor(
      async () => (await Promise.all(stacks.map(ledger))).every((l) => l.synced),
      10_000,
      'every agent to hear the others',
    );
    let answered = 0;
    let shareRefusals = 0;
    const worker = async (stack: Stack) => {
      // Until this agent sees the budget spent: a deadline, not a number of attempts, so a slow
      // machine (gossip rounds late) cannot end the loop before the counters converge.
      const deadline = Date.now() + 60_000;
      while (Date.now() < deadline) {
        const res = await send(stack);
        if (res.status === 200) {
          spent += await reported(res);
          answered++;
          continue;
        }
        const error = (await res.json()) as { error: { code: string; message: string } };
        assert.equal(res.status, 429);
        assert.equal(error.error.code, 'overflow_budget_exhausted');
        if (EXHAUSTED.test(error.error.message)) return; // this agent sees the budget spent
        shareRefusals++; // its share for this interval is used: others are spending too
        await new Promise((resolve) => setTimeout(resolve, 20)); // a client pausing before it retries
      }
      assert.fail('the budget never ran out at this agent');
    };
    await Promise.all(stacks.flatMap((stack) => Array.from({ length: WORKERS_PER_AGENT }, () => worker(stack))));

    assert.equal(provider.requests.length, answered, 'refused requests never reached the provider');
    // Each agent alone would admit the whole budget (3× in total). Counted together, the
    // documented worst case is the budget plus one request's estimate per other spender (the
    // last interval's blind admissions, docs/policy.md, "Overflow budgets": overshoot).
    const estimate = estimatePromptTokens(BODY) + 10;
    const bound = BUDGET + (AGENTS - 1) * estimate;
    assert.ok(spent <= bound, `provider reported ${spent} tokens for a ${BUDGET}-token budget (bound ${bound})`);
    assert.ok(spent > BUDGET - 2 * estimate, `the budget was used (${spent} of ${BUDGET})`);
    // Converged: every agent counts exactly what the provider reported, nothing pending.
    await waitFor(
      async () => (await Promise.all(stacks.map(used))).every((u) => u === spent),
      10_000,
      `every agent to count the tokens the provider reported`,
    );
    console.log(`# ${answered} answered, ${spent} tokens of ${BUDGET}, ${shareRefusals} share refusals`);
  });

  it('a restarted agent does not reset the tenant’s usage: it admits nothing before it has heard the cluster, then counts the old incarnation’s spend', async () => {
    const before = provider.requests.length;
    const old = await ledger(stacks[0]);
    await stacks[0].close();
    stacks[0] = await start(0);
    const fresh = await ledger(stacks[0]);
    assert.notEqual(fresh.origin, old.origin, 'a restart is a new origin');
    const early = await send(stacks[0]);
    assert.equal(early.status, 429);
    assert.equal(((await early.json()) as { error: { code: string } }).error.code, 'overflow_budget_exhausted');
    await waitFor(async () => (await ledger(stacks[0])).synced, 10_000, 'the restarted agent to hear the cluster');
    assert.equal(await used(stacks[0]), spent, "the old incarnation's counters, kept by its peers");
    const late = await send(stacks[0]);
    assert.equal(late.status, 429);
    assert.match(((await late.json()) as { error: { message: string } }).error.message, EXHAUSTED);
    assert.equal(provider.requests.length, before, 'nothing overflowed through the restarted agent');
  });

  it('after the window, overflow resumes through every agent', async () => {
    offset += 60_000 - (now() % 60_000) + 1000; // 1 s into the next minute
    for (const stack of stacks) {
      await waitFor(
        async () => (await send(stack)).status === 200,
        10_000,
        `overflow through ${stack.agent.apiUrl} in the new window`,
      );
    }
    for (const stack of stacks) assert.ok((await used(stack)) <= BUDGET);
  });
});
