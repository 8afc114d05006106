// RequestPath alone, with fake dependencies: no agent, no discovery. The pod it forwards to is a
// real loopback HTTP server (the path's own undici dispatcher talks to it); everything the path
// asks the rest of the agent (identity, classification, policy, the pool, the providers) is a
// stand-in the test controls and inspects.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createPodDispatcher } from '../agent/forward/pod.ts';
import type { Candidate } from '../agent/route/candidate.ts';
import type { LeaveVerdict } from '../agent/route/router.ts';
import { RequestPath, type OverflowResult, type RequestPathDeps } from '../agent/server/request-path/inference.ts';
import { createMetrics } from '../agent/server/observability/metrics.ts';
import { nodeRequest } from '../agent/server/exchange.ts';
import type { RouteRequest } from '../agent/types.ts';
import { routeCandidate, routePod, routePolicy } from './helpers/route-fixtures.ts';

const MODEL = 'm';
const POLICY = routePolicy({
  name: 'ns/p',
  sloTtftMs: 10_000,
  overflow: { providers: ['prov'], denyTags: ['pii'], denyTenants: [] },
});
const STAY: LeaveVerdict = { allowed: false, reason: 'may not leave', providers: [] };
const LEAVE: LeaveVerdict = { allowed: true, reason: 'may overflow to prov', providers: ['prov'] };
const ANSWER = {
  id: 'x',
  object: 'chat.completion',
  choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
};

let pod: Server;
let podAddress: string;
const seenByPod: { path: string; headers: Record<string, unknown>; body: string }[] = [];

before(async () => {
  pod = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      seenByPod.push({ path: req.url ?? '', headers: req.headers, body });
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(ANSWER));
    });
  });
  await new Promise<void>((resolve) => pod.listen(0, '127.0.0.1', resolve));
  podAddress = `127.0.0.1:${(pod.address() as AddressInfo).port}`;
});
const dispatchers: ReturnType<typeof createPodDispatcher>[] = [];
after(async () => {
  pod.close();
  await Promise.all(dispatchers.map((d) => d.close()));
});

const candidate = (address: string): Candidate =>
  routeCandidate('pod-0', {
    pod: routePod('pod-0', { node: 'n', address, engine: 'vllm' }),
    kvCache: 0.1,
    params: { base: 50, perQueued: 100, perRunning: 5, perKPromptTokens: 10 },
  });

interface Fakes {
  candidates: Candidate[];
  leave: LeaveVerdict;
  overflow?: (request: RouteRequest, providers: readonly string[]) => Promise<OverflowResult>;
  classify?: () => string[];
  logSample?: number;
}

function requestPath(f: Fakes) {
  const logs: string[] = [];
  const lines: string[] = [];
  const calls = { begun: 0, ended: [] as boolean[], failed: 0, overflowed: [] as string[][] };
  const deps: RequestPathDeps = {
    metrics: createMetrics(),
    dispatcher: createPodDispatcher(4),
    limits: {
      maxBodyBytes: 1 << 20,
      maxRetries: 1,
      maxWaiting: 10,
      prefixMaxBlocks: 256,
      maxLabelValues: 10,
      maxJsonDepth: 16,
      maxUpstreamBodyBytes: 1 << 20,
      pod: { connectMs: 2000, responseMs: 2000, idleMs: 2000 },
    },
    now: () => performance.now(),
    rand: () => 0,
    log: (level, message) => logs.push(`${level}: ${message}`),
    newRequestId: () => 'fresh-id',
    requestLog: { sample: f.logSample ?? 0, write: (line) => lines.push(line) },
    podAuth: () => ({ authorization: 'Bearer pod-key' }),
    identify: () => ({ namespace: 'ns', tenant: 'team' }),
    classify: f.classify ?? (() => []),
    isKnownModel: (model) => model === MODEL,
    policyFor: () => POLICY,
    leaveVerdict: () => f.leave,
    pool: {
      candidates: () => f.candidates,
      begin: () => {
        calls.begun++;
        return { firstByte: () => {}, answered: () => {}, end: (ok) => void calls.ended.push(ok) };
      },
      markFailed: () => void calls.failed++,
      nextChange: async () => 'timeout',
    },
    overflow: async (request, _parsed, providers) => {
      calls.overflowed.push([...providers]);
      if (!f.overflow) throw new Error('no overflow expected');
      return f.overflow(request, providers);
    },
  };
  dispatchers.push(deps.dispatcher);
  return { path: new RequestPath(deps), deps, logs, lines, calls };
}

const chat = (
  body: unknown = { model: MODEL, messages: [{ role: 'user', content: 'hello' }] },
  headers: Record<string, string> = {},
) =>
  new Request('http://agent/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });

/** Serves one request through the path on a real loopback listener, as the API listener does. */
async function handled(path: RequestPath, request: Request): Promise<Response> {
  const server = createServer((req, res) => void path.handle('chat', nodeRequest(req), res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  try {
    const res = await fetch(`http://127.0.0.1:${port}${new URL(request.url).pathname}`, {
      method: 'POST',
      headers: request.headers,
      body: await request.arrayBuffer(),
    });
    return new Response(await res.arrayBuffer(), { status: res.status, headers: res.headers });
  } finally {
    server.close();
    server.closeAllConnections();
  }
}

test("forwards to the chosen pod with the agent's headers and says where it went", async () => {
  const { path, calls, deps } = requestPath({ candidates: [candidate(podAddress)], leave: STAY });
  const res = await handled(path, chat(undefined, { 'x-request-id': 'client-id' }));
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), ANSWER);
  assert.equal(res.headers.get('x-kinference-route'), 'local/pod-0');
  assert.equal(res.headers.get('x-request-id'), 'client-id');
  const seen = seenByPod.at(-1)!;
  assert.equal(seen.path, '/v1/chat/completions');
  assert.equal(seen.headers.authorization, 'Bearer pod-key');
  assert.equal(seen.headers['x-request-id'], 'client-id');
  assert.equal(calls.begun, 1);
  assert.deepEqual(calls.ended, [true]);
  assert.match(
    await deps.metrics.registry.metrics(),
    /kinference_requests_total\{api="chat",route="local",outcome="ok",model="m",policy="ns\/p"\} 1/,
  );
});

test('a pod that refuses the connection is marked failed, another is tried, then 502 names the failure', async () => {
  const dead = createServer();
  await new Promise<void>((resolve) => dead.listen(0, '127.0.0.1', resolve));
  const deadAddress = `127.0.0.1:${(dead.address() as AddressInfo).port}`;
  await new Promise<void>((resolve) => dead.close(() => resolve()));
  const first = candidate(deadAddress);
  const second = { ...candidate(deadAddress), pod: { ...first.pod, uid: 'ns/pod-1', name: 'pod-1' } };
  const { path, calls } = requestPath({ candidates: [first, second], leave: STAY });
  const res = await handled(path, chat());
  assert.equal(res.status, 502);
  const body = (await res.json()) as { error: { code: string; message: string } };
  assert.equal(body.error.code, 'upstream_failed');
  assert.match(body.error.message, /tried 2 pods/);
  assert.equal(calls.failed, 2);
});

test('with no pod and leaving allowed, the providers answer and the route says which', async () => {
  const { path, calls } = requestPath({
    candidates: [],
    leave: LEAVE,
    overflow: async () => ({
      ok: true,
      response: new Response(JSON.stringify(ANSWER), {
        headers: { 'content-type': 'application/json', 'x-kinference-route': 'overflow/prov' },
      }),
    }),
  });
  const res = await handled(path, chat());
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('x-kinference-route'), 'overflow/prov');
  assert.deepEqual(calls.overflowed, [['prov']]);
});

test("every provider failing is the overflow's status (503 unreachable, 502 answered badly) with Retry-After", async () => {
  for (const status of [502, 503] as const) {
    const { path } = requestPath({
      candidates: [],
      leave: LEAVE,
      overflow: async () => ({ ok: false, status, message: 'every overflow provider failed (prov: failed)' }),
    });
    const res = await handled(path, chat());
    assert.equal(res.status, status);
    assert.equal(res.headers.get('retry-after'), '1');
    const body = (await res.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, status === 503 ? 'providers_unavailable' : 'providers_failed');
    assert.match(body.error.message, /no pod can answer in time and every overflow provider failed/);
  }
});

test('no pod and no leaving: a rejection that names the policy, never a provider call', async () => {
  const { path, calls } = requestPath({ candidates: [], leave: STAY });
  const res = await handled(path, chat());
  assert.ok(res.status === 429 || res.status === 503, String(res.status));
  assert.equal(res.headers.get('x-kinference-policy'), 'ns/p');
  assert.ok(res.headers.get('retry-after'));
  assert.deepEqual(calls.overflowed, []);
});

test("bad requests are the client's: unknown model 404, broken JSON 400, both OpenAI-shaped", async () => {
  const { path } = requestPath({ candidates: [candidate(podAddress)], leave: STAY });
  const unknown = await handled(path, chat({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }));
  assert.equal(unknown.status, 404);
  assert.equal(((await unknown.json()) as { error: { code: string } }).error.code, 'model_not_found');
  const broken = await handled(
    path,
    new Request('http://agent/v1/chat/completions', { method: 'POST', body: '{"model":' }),
  );
  assert.equal(broken.status, 400);
  assert.equal(typeof ((await broken.json()) as { error: { message: string } }).error.message, 'string');
});

test('an error of our own is a 500 and goes to the injected logger, not the console', async () => {
  const { path, logs } = requestPath({
    candidates: [],
    leave: STAY,
    classify: () => {
      throw new Error('classifier exploded');
    },
  });
  const res = await handled(path, chat());
  assert.equal(res.status, 500);
  assert.equal(((await res.json()) as { error: { type: string } }).error.type, 'server_error');
  assert.equal(logs.length, 1);
  assert.match(logs[0], /^error: unexpected error on the request path: Error: classifier exploded/);
});

test('a sampled request writes one log line when its body ends; the id is the fresh one when the client sent none', async () => {
  const { path, lines } = requestPath({ candidates: [candidate(podAddress)], leave: STAY, logSample: 1 });
  const res = await handled(path, chat());
  assert.equal(res.headers.get('x-request-id'), 'fresh-id');
  await res.text();
  assert.equal(lines.length, 1);
  const line = JSON.parse(lines[0]) as Record<string, unknown>;
  assert.equal(line.requestId, 'fresh-id');
  assert.equal(line.route, 'local/pod-0');
  assert.equal(line.policy, 'ns/p');
  assert.equal(line.outcome, 'ok');
});

test("the pod's learning and slot wait for the answer's bytes, and are done when the client has them", async () => {
  // A pod that answers a stream in two writes, so the client's first bytes come before its end.
  const streaming = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const streamed = req.headers.accept?.includes('event-stream') && seenStream;
      if (!streamed) return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(ANSWER));
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"choices":[{"delta":{"content":"h"}}]}\n\n');
      setTimeout(() => res.end('data: [DONE]\n\n'), 50);
    });
  });
  let seenStream = false;
  await new Promise<void>((resolve) => streaming.listen(0, '127.0.0.1', resolve));
  const address = `127.0.0.1:${(streaming.address() as AddressInfo).port}`;
  const { path, deps } = requestPath({ candidates: [candidate(address)], leave: STAY });
  // What the answer's writer had done when each hook ran.
  const seen: string[] = [];
  let answer: ServerResponse | undefined;
  deps.pool.begin = () => ({
    firstByte: () => void seen.push(`firstByte after head ${answer!.headersSent}`),
    answered: () => void seen.push(`answered after end ${answer!.writableEnded}`),
    end: (ok) => void seen.push(`end ${ok}`),
  });
  const server = createServer((req, res) => {
    answer = res;
    void path.handle('chat', nodeRequest(req), res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/chat/completions`;
  const post = (stream: boolean) =>
    fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], stream }),
    });
  try {
    const whole = await post(false);
    await whole.arrayBuffer();
    assert.deepEqual(seen, ['answered after end true', 'end true'], 'learned after the write, done by its end');
    assert.match(
      await deps.metrics.registry.metrics(),
      /kinference_upstream_ttft_seconds_count\{route="local",stream="false"\} 1/,
    );
    seen.length = 0;
    seenStream = true;
    const stream = await post(true);
    const reader = stream.body!.getReader();
    await reader.read(); // the first event, while the pod holds the rest back
    assert.deepEqual(seen, ['firstByte after head true'], 'learned after the first bytes, before the end');
    assert.match(
      await deps.metrics.registry.metrics(),
      /kinference_pod_ttft_seconds_count\{pod="pod-0",source="measured"\} 1/,
    );
    while (!(await reader.read()).done);
    assert.deepEqual(seen, ['firstByte after head true', 'end true']);
  } finally {
    server.close();
    server.closeAllConnections();
    streaming.close();
    streaming.closeAllConnections();
  }
});
