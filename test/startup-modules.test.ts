// What a running agent has loaded (docs/benchmarks.md, "Memory": every loaded module's code and source stay in
// the heap for the process's life): an agent in static mode that served requests has loaded
// undici through its public entry (never by a path inside the package), typebox's error
// iterator but not its value operations, prom-client through its public entry, and
// nothing of the Kubernetes client; the admin listener on Hono. Checked in a fresh
// Node process that records every module resolved (import and require) while a real agent starts,
// forwards a request to a pod, and serves its admin pages.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { startSim } from '../shared/sim/server.ts';

const root = new URL('..', import.meta.url).href;

async function modulesLoaded(podAddress: string): Promise<string[]> {
  const script = `
    import { registerHooks } from 'node:module';
    const resolved = [];
    registerHooks({ resolve(specifier, context, next) { const r = next(specifier, context); resolved.push(r.url); return r; } });
    const { startAgent } = await import(${JSON.stringify(`${root}agent/agent.ts`)});
    const { settingsFromObject } = await import(${JSON.stringify(`${root}agent/config/load.ts`)});
    const settings = settingsFromObject({
      node: 'startup', listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0' }, scrapeInterval: '50ms',
      pods: [{ name: 'pod-0', address: ${JSON.stringify(podAddress)}, engine: 'vllm', models: ['m'] }],
      providers: [{ name: 'oa', kind: 'openai', endpoint: 'http://127.0.0.1:9', models: { m: 'm' }, apiKey: { env: 'STARTUP_TEST_KEY' } }],
    });
    const agent = await startAgent(settings, { log: () => {}, requestLog: () => {} });
    await new Promise((r) => setTimeout(r, 300));
    // The client here is node:http's CommonJS module, so that this process loads no web fetch of its own.
    const http = process.getBuiltinModule('node:http');
    const call = (url, method, body) => new Promise((resolve, reject) => {
      const req = http.request(url, { method, headers: { 'content-type': 'application/json' } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode));
      });
      req.on('error', reject);
      req.end(body);
    });
    const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    const status = await call(agent.apiUrl + '/v1/chat/completions', 'POST', body);
    for (const path of ['/metrics', '/debug/state', '/healthz']) await call(agent.adminUrl + path, 'GET');
    await agent.shutdown();
    const builtins = process.moduleLoadList.filter((m) => m.startsWith('NativeModule ')).map((m) => m.slice(13));
    console.log(JSON.stringify({ status, resolved: [...resolved, ...builtins.map((b) => 'node:internal/' + b)] }));
  `;
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], {
    env: { ...process.env, STARTUP_TEST_KEY: 'k' },
  });
  const { status, resolved } = JSON.parse(stdout.trim().split('\n').at(-1)!) as { status: number; resolved: string[] };
  assert.equal(status, 200, 'the agent forwarded the request to its pod');
  return resolved;
}

describe('modules a static-mode agent loads', () => {
  it("loads undici and prom-client through their public entries; typebox's errors, not its values; no Kubernetes client; Hono for the admin listener", async () => {
    const pod = await startSim({ models: ['m'] });
    try {
      const loaded = await modulesLoaded(`127.0.0.1:${pod.port}`);
      const has = (pattern: RegExp) => loaded.filter((u) => pattern.test(u));
      assert.ok(has(/undici\/lib\/dispatcher\/agent\.js$/).length > 0, 'undici Agent loaded');
      assert.ok(has(/undici\/lib\/dispatcher\/client-h1\.js$/).length > 0, 'the HTTP/1.1 client ran');
      assert.ok(has(/node_modules\/undici\/index\.js$/).length > 0, "undici through its public entry ('undici')");
      assert.ok(has(/@sinclair\/typebox\/.*errors/).length > 0, "typebox's error iterator loaded");
      assert.deepEqual(has(/@sinclair\/typebox\/build\/(esm|cjs)\/value\/value\//), [], "typebox's value operations");
      assert.deepEqual(has(/@kubernetes\/client-node/), [], 'the Kubernetes client');
      assert.ok(has(/node_modules\/hono\//).length > 0, 'the admin listener on Hono');
      assert.ok(has(/^node:internal\/internal\/http$/).length > 0, "node's own modules are listed");
      assert.ok(has(/node_modules\/prom-client\/index\.js$/).length > 0, 'prom-client through its public entry');
    } finally {
      await pod.close();
    }
  });
});
