// What an agent loads follows what it is configured with: the AWS SigV4 and event-stream modules
// (~3 MB resident) only when a Bedrock provider is configured. Checked in a fresh Node process
// (this test process loads them itself through the Bedrock stand-in) that records every module
// resolved while a real agent starts and serves.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const root = new URL('..', import.meta.url).href;

/** The AWS modules a fresh process resolved while starting an agent with these providers. */
async function awsModulesLoaded(providers: unknown[]): Promise<string[]> {
  const script = `
    import { registerHooks } from 'node:module';
    const resolved = [];
    registerHooks({ resolve(specifier, context, next) { const r = next(specifier, context); resolved.push(r.url); return r; } });
    const { startAgent } = await import(${JSON.stringify(`${root}agent/agent.ts`)});
    const { settingsFromObject } = await import(${JSON.stringify(`${root}agent/config/load.ts`)});
    const settings = settingsFromObject({
      node: 'lazy', listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0' },
      pods: [{ name: 'pod-0', address: '127.0.0.1:9', engine: 'vllm', models: ['m'] }],
      providers: ${JSON.stringify(providers)},
    });
    const agent = await startAgent(settings, { log: () => {} });
    await fetch(agent.apiUrl + '/v1/models');
    await new Promise((r) => setTimeout(r, 100));
    await agent.shutdown();
    console.log(JSON.stringify(resolved.filter((u) => /@smithy|@aws-crypto|bedrock-stream/.test(u))));
  `;
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], {
    env: { ...process.env, LAZY_TEST_KEY: 'k' },
  });
  return JSON.parse(stdout.trim().split('\n').at(-1)!) as string[];
}

describe('modules loaded by configuration', () => {
  it('an agent without Bedrock never loads the AWS modules; one with Bedrock loads them at start', async () => {
    const openai = {
      name: 'oa',
      kind: 'openai',
      endpoint: 'http://127.0.0.1:9',
      models: { m: 'm' },
      apiKey: { env: 'LAZY_TEST_KEY' },
    };
    const bedrock = {
      name: 'br',
      kind: 'bedrock',
      region: 'us-east-1',
      models: { m: 'm' },
      apiKey: { env: 'LAZY_TEST_KEY' },
    };
    assert.deepEqual(await awsModulesLoaded([openai]), []);
    const loaded = await awsModulesLoaded([bedrock]);
    for (const name of ['@smithy/signature-v4', '@aws-crypto/sha256-js', '@smithy/eventstream-codec', 'bedrock-stream'])
      assert.ok(
        loaded.some((u) => u.includes(name)),
        `${name} loaded with a Bedrock provider: ${loaded.join(', ')}`,
      );
  });
});
