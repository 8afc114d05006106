// Issue 12, "large valid bodies starve the scraper": four clients sending 3 MB bodies kept the
// agent's event loop so busy that scrapes were read late, the pods looked stale and unrelated
// requests overflowed. A pod is stale when its scrapes fail, not when the agent is slow to read
// them, so routing must keep every pod while the bodies come in.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startOpenAIStandin } from './fixtures/openai-provider.ts';
import type { Explanation } from '../agent/server/admin/explain.ts';
import { chatBody, MODEL, openaiProvider, postJson, startStack } from './helpers/stack.ts';

const KEY_ENV = 'KINFERENCE_TEST_SCRAPE_LOAD_KEY';

test('large bodies from four clients never make a pod stale, and unrelated requests stay on the pods', async (t) => {
  process.env[KEY_ENV] = 'sk-test';
  const provider = await startOpenAIStandin({ apiKey: 'sk-test' });
  const stack = await startStack({
    pods: [{}, {}],
    config: {
      // Stale after two 20 ms intervals: any loop stall of that size used to drop the pods. A long
      // timeout: the test is about a busy agent, not a slow pod.
      scrapeInterval: '20ms',
      limits: { scrapeTimeout: '10s' },
      providers: [openaiProvider('hosted', provider.url, KEY_ENV)],
      policies: [
        {
          metadata: { name: 'default', namespace: '*' },
          spec: { slo: { ttft: '10s' }, exclude: [], overflow: { providers: ['hosted'] }, wait: { max: '100ms' } },
        },
      ],
    },
  });
  t.after(async () => {
    await stack.close();
    await provider.close();
  });

  // ~3 MB of plain prose per request: valid, under the body limit, costly to read, parse and
  // classify. Their own prompts are too long for a pod to meet the SLO, so they overflow: more work
  // for the loop (a 3 MB body forwarded), and the reason a hosted provider is configured.
  const large = JSON.stringify(chatBody('the quick brown fox jumps over the lazy dog '.repeat(70_000)));
  assert.ok(large.length > 3_000_000);
  let loading = true;
  let largeSent = 0;
  const client = async () => {
    while (loading) {
      const response = await postJson(`${stack.api}/v1/chat/completions`, large, { 'x-kinference-tenant': 'bulk' });
      await response.arrayBuffer();
      largeSent++;
    }
  };
  const clients = [client(), client(), client(), client()];

  const routes: string[] = [];
  const staleDrops: string[] = [];
  try {
    while (largeSent < 12 || routes.length < 30) {
      const explained = (await (await fetch(`${stack.admin}/explain?model=${MODEL}`)).json()) as Explanation;
      for (const d of explained.dropped) if (d.reason === 'stale') staleDrops.push(`${d.pod}: ${d.detail}`);
      const response = await postJson(`${stack.api}/v1/chat/completions`, chatBody('Hi'), {
        'x-kinference-tenant': 'interactive',
      });
      await response.arrayBuffer();
      routes.push(response.headers.get('x-kinference-route') ?? String(response.status));
    }
  } finally {
    loading = false;
    await Promise.all(clients);
  }
  assert.deepEqual(staleDrops, [], 'no pod judged stale');
  assert.deepEqual(
    routes.filter((r) => !r.startsWith('local/')),
    [],
    `every unrelated request served by a pod (${routes.length} requests, ${largeSent} large bodies)`,
  );
});
