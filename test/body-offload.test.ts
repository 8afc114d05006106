// Large bodies judged on worker threads (issue 12, build item 5: parsing and classifying a large
// body must not hold the event loop). The verdict must be the event loop's verdict, exactly: a
// worker that fails or dies leaves the body to the loop, and sensitive data still never leaves.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { classifyRequest } from '../agent/classify/classify.ts';
import { compileDetectors, type DetectorSpec } from '../agent/classify/custom.ts';
import { DEFAULT_SCAN_LIMITS } from '../agent/classify/walk.ts';
import { BodyOffload, parsedFromVerdict } from '../agent/server/bodies/body-offload.ts';
import type { BodyVerdict } from '../agent/server/bodies/body-work.ts';
import { parseInferenceRequest, RequestError } from '../agent/server/bodies/request.ts';
import { buildRouteRequest } from '../agent/server/bodies/route-request.ts';
import { DEFAULT_PREFIX_MAX_BLOCKS } from '../agent/prefix/blocks.ts';
import type { RequestKind } from '../agent/types.ts';
import { mulberry32 } from '../shared/sim/random.ts';
import { requestText } from './fixtures/fuzz-requests.ts';
import { startOpenAIStandin, type OpenAIStandin } from './fixtures/openai-provider.ts';
import { MODEL, openaiProvider, postJson, startStack, waitFor, type Stack } from './helpers/stack.ts';

const DETECTORS: DetectorSpec[] = [
  { name: 'codename', tag: 'confidential', keywords: ['bluebird'] },
  { name: 'ticket', tag: 'internal', pattern: 'TCK-\\d{6}' },
];
const options = (specs: readonly DetectorSpec[] = DETECTORS, workerUrl?: URL) =>
  new BodyOffload({
    minBytes: 1,
    threads: 2,
    idleMs: 60_000,
    maxDepth: 64,
    prefixMaxBlocks: DEFAULT_PREFIX_MAX_BLOCKS,
    scanLimits: DEFAULT_SCAN_LIMITS,
    detectorSpecs: () => specs,
    log: () => {},
    workerUrl,
  });

/** What the request path concludes on its own event loop, with the functions it calls inline. */
function onTheLoop(kind: RequestKind, bytes: Uint8Array, headerTags: string | null, specs = DETECTORS): BodyVerdict {
  let parsed;
  try {
    parsed = parseInferenceRequest(kind, bytes, 64);
  } catch (error) {
    if (!(error instanceof RequestError)) throw error;
    return { ok: false, status: error.status, message: error.message, param: error.param, code: error.code };
  }
  const detectors = compileDetectors(specs).detectors;
  const classification = classifyRequest(headerTags, parsed.body, { limits: DEFAULT_SCAN_LIMITS, detectors });
  const {
    tenant: _t,
    namespace: _n,
    tags: _g,
    ...route
  } = buildRouteRequest(parsed, { tenant: 'x', namespace: 'y' }, classification.tags, DEFAULT_PREFIX_MAX_BLOCKS);
  return { ok: true, model: parsed.model, stream: parsed.stream, classification, route };
}

const bytesOf = (text: string) => new TextEncoder().encode(text);
const filler = (n: number) => 'lorem ipsum dolor sit amet '.repeat(Math.ceil(n / 27)).slice(0, n);

describe('body offload: a worker reaches the event loop’s verdict', () => {
  let offload: BodyOffload;
  before(() => (offload = options()));
  after(() => offload.close());

  it('on 300 seeded fuzzed bodies, 100 valid ones and on large bodies with sensitive data anywhere', async () => {
    const rand = mulberry32(0x0ff10ad);
    const cases: { kind: RequestKind; text: string; tags: string | null }[] = [];
    for (let i = 0; i < 300; i++)
      cases.push({
        kind: (['chat', 'completions', 'embeddings', 'responses'] as const)[i % 4],
        text: requestText(rand, MODEL),
        tags: i % 7 === 0 ? 'team-x, ,bad tag' : null,
      });
    // Valid bodies of every kind, some carrying a secret, some with parts and tools.
    const secrets = ['', '', 'jane.doe@example.com', '4111 1111 1111 1111', 'bluebird', 'TCK-654321'];
    const pick = <T>(xs: readonly T[]) => xs[Math.floor(rand() * xs.length)];
    for (let i = 0; i < 100; i++) {
      const content = `${filler(Math.floor(rand() * 20_000))} ${pick(secrets)} ${filler(Math.floor(rand() * 500))}`;
      const kind = (['chat', 'completions', 'embeddings', 'responses'] as const)[i % 4];
      const body =
        kind === 'chat'
          ? {
              model: MODEL,
              messages: [
                { role: 'system', content: pick(['be brief', filler(3000)]) },
                { role: 'user', content: i % 3 === 0 ? [{ type: 'text', text: content }] : content },
              ],
              ...(i % 5 === 0
                ? { tools: [{ type: 'function', function: { name: 'f', description: pick(secrets) } }] }
                : {}),
              max_tokens: 1 + (i % 50),
              stream: i % 2 === 0,
            }
          : kind === 'responses'
            ? { model: MODEL, input: content, max_output_tokens: 9 }
            : kind === 'completions'
              ? { model: MODEL, prompt: content, max_tokens: 3 }
              : { model: MODEL, input: [content, pick(secrets) || 'x'] };
      cases.push({ kind, text: JSON.stringify(body), tags: i % 9 === 0 ? 'team-y' : null });
    }
    for (const secret of [
      'mail jane.doe@example.com now',
      'card 4111 1111 1111 1111',
      'project bluebird',
      'see TCK-123456',
      '',
    ])
      cases.push({
        kind: 'chat',
        text: JSON.stringify({
          model: MODEL,
          messages: [
            { role: 'system', content: filler(150_000) },
            { role: 'user', content: [{ type: 'text', text: `${filler(60_000)} ${secret}` }] },
          ],
          max_tokens: 7,
          stream: true,
        }),
        tags: null,
      });
    cases.push({
      kind: 'responses',
      text: JSON.stringify({ model: MODEL, input: filler(200_000), instructions: 'be brief' }),
      tags: null,
    });
    cases.push({
      kind: 'chat',
      text: `{"model":"${MODEL}","messages":${'['.repeat(70)}${']'.repeat(70)}}`,
      tags: null,
    });
    let rejected = 0;
    let tagged = 0;
    for (const c of cases) {
      const bytes = bytesOf(c.text);
      const verdict = await offload.judge(c.kind, bytes, c.tags);
      if (bytes.byteLength === 0) {
        assert.equal(verdict, undefined, 'an empty body is below any threshold');
        continue;
      }
      assert.ok(verdict, 'judged by a worker');
      assert.deepEqual(verdict, onTheLoop(c.kind, bytes, c.tags), c.text.slice(0, 200));
      if (!verdict.ok) rejected++;
      else if (verdict.classification.tags.length > 0) tagged++;
    }
    // The cases cover both outcomes (a generator that only made 400s would prove little).
    assert.ok(rejected > 10 && cases.length - rejected > 10, `${rejected} of ${cases.length} rejected`);
    assert.ok(tagged >= 20, `${tagged} tagged`);
    assert.ok(offload.threads >= 1 && offload.threads <= 2);
  });

  it('the caller keeps its bytes (the worker gets a copy of its own)', async () => {
    const text = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: filler(200_000) }] });
    const bytes = Buffer.from(text);
    const verdict = await offload.judge('chat', bytes, null);
    assert.equal(verdict?.ok, true);
    assert.equal(bytes.toString('utf8'), text);
  });

  it('small bodies stay on the loop; the parsed body is read only when asked for', async () => {
    const small = new BodyOffload({ ...optionsOf(), minBytes: 1000 });
    assert.equal(await small.judge('chat', bytesOf('{"model":"m"}'), null), undefined);
    assert.equal(small.threads, 0, 'no worker started for a small body');
    await small.close();
    const text = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: filler(5000) }] });
    const parsed = parsedFromVerdict('chat', bytesOf(text), { model: MODEL, stream: false });
    assert.equal(parsed.model, MODEL);
    assert.deepEqual(parsed.body, JSON.parse(text));
    assert.equal(parsed.body, parsed.body, 'parsed once');
  });

  it('a reload’s detectors reach the workers before the next body', async () => {
    let specs: readonly DetectorSpec[] = [];
    const reloading = new BodyOffload({ ...optionsOf(), detectorSpecs: () => specs });
    const body = bytesOf(
      JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: `${filler(3000)} bluebird` }] }),
    );
    const first = await reloading.judge('chat', body, null);
    assert.deepEqual(first?.ok && first.classification.tags, []);
    specs = DETECTORS;
    const second = await reloading.judge('chat', body, null);
    assert.deepEqual(second?.ok && second.classification.tags, ['confidential']);
    await reloading.close();
  });

  it('a worker that dies leaves its body to the loop, and the next body gets a new worker', async () => {
    const logged: string[] = [];
    const dying = new BodyOffload({
      ...optionsOf(),
      workerUrl: new URL('./fixtures/dying-body-worker.ts', import.meta.url),
      log: (_level, message) => logged.push(message),
    });
    const body = bytesOf(
      JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'jane.doe@example.com' }] }),
    );
    assert.equal(await dying.judge('chat', body, null), undefined, 'the caller judges it');
    assert.equal(await dying.judge('chat', body, null), undefined);
    assert.ok(
      logged.some((l) => /body worker ended: exit code 3/.test(l)),
      logged.join('\n'),
    );
    await dying.close();
  });
});

/** The options `options()` builds, as a plain object to spread. */
function optionsOf(): ConstructorParameters<typeof BodyOffload>[0] {
  return {
    minBytes: 1,
    threads: 1,
    idleMs: 60_000,
    maxDepth: 64,
    prefixMaxBlocks: DEFAULT_PREFIX_MAX_BLOCKS,
    scanLimits: DEFAULT_SCAN_LIMITS,
    detectorSpecs: () => DETECTORS,
    log: () => {},
  };
}

describe('body offload through a running agent: large bodies judged off the loop, data still stays home', () => {
  const KEY_ENV = 'KINFERENCE_TEST_OFFLOAD_KEY';
  let stack: Stack;
  let provider: OpenAIStandin;

  before(async () => {
    process.env[KEY_ENV] = 'sk-offload-test';
    provider = await startOpenAIStandin({ apiKey: 'sk-offload-test' });
    stack = await startStack({
      pods: [{ maxSeqs: 1 }],
      config: {
        providers: [{ ...openaiProvider('hosted', provider.url, KEY_ENV), timeout: '2s' }],
        detectors: [{ name: 'codename', tag: 'confidential', keywords: ['bluebird'] }],
        policies: [
          {
            metadata: { name: 'default', namespace: '*' },
            spec: {
              exclude: [{ metric: 'queued', above: 0.5, window: '1s' }],
              overflow: { providers: ['hosted'], deny: { tags: ['pii', 'unscanned', 'confidential'] } },
              wait: { max: '1ms' },
            },
          },
        ],
        // Every body of 1 KiB or more goes to a worker.
        limits: { offloadBodyBytes: 1024, bodyWorkers: 1, maxBodyBytes: 8 * 1024 * 1024 },
      },
    });
    // Traffic the agent never sees saturates the pod, so clean requests overflow.
    for (let i = 0; i < 4; i++) stack.sims[0].engine.submit({ promptTokens: 50, maxTokens: 10_000_000 });
    await waitFor(
      async () => {
        const e = (await (await fetch(`${stack.admin}/explain?model=${MODEL}`)).json()) as { action: string };
        return e.action === 'overflow';
      },
      5000,
      'the saturated pod to be excluded',
    );
  });
  after(async () => {
    await stack?.close();
    await provider?.close();
  });

  const chat = (content: string) => ({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 5 });

  it('a clean large body overflows whole; large bodies with PII or a codename never reach the provider', async () => {
    const clean = chat(`${filler(2_000_000)} the end`);
    const ok = await postJson(`${stack.api}/v1/chat/completions`, clean);
    await ok.arrayBuffer();
    assert.equal(ok.headers.get('x-kinference-route'), 'overflow/hosted');
    assert.equal(provider.requests.length, 1);
    const sent = provider.requests[0].body as { messages: { content: string }[] };
    assert.equal(sent.messages[0].content, clean.messages[0].content, 'the body, parsed where needed, went whole');

    for (const secret of ['write to jane.doe@example.com', 'card 4111-1111-1111-1111', 'project BLUEBIRD']) {
      const response = await postJson(`${stack.api}/v1/chat/completions`, chat(`${filler(500_000)} ${secret}`));
      await response.arrayBuffer();
      assert.notEqual(response.headers.get('x-kinference-route'), 'overflow/hosted', secret);
    }
    assert.equal(provider.requests.length, 1, 'nothing more reached the provider');
    const metrics = await (await fetch(`${stack.admin}/metrics`)).text();
    assert.match(metrics, /kinference_classified_total\{detector="email",tag="pii"\} 1/);
    assert.match(metrics, /kinference_classified_total\{detector="codename",tag="confidential"\} 1/);
  });

  it('a large malformed body gets the same 400 as on the loop', async () => {
    const text = JSON.stringify(chat(filler(300_000))).replace('"messages"', '"messages":');
    const response = await fetch(`${stack.api}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: text,
    });
    assert.equal(response.status, 400);
    const expected = onTheLoop('chat', bytesOf(text), null);
    assert.equal(expected.ok, false);
    const error = ((await response.json()) as { error: { message: string; code: string } }).error;
    assert.equal(error.message, !expected.ok && expected.message);
    assert.equal(error.code, 'invalid_json');
  });
});
