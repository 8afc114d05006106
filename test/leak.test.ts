// The data boundary, end to end: a running agent whose only pod is saturated, a hosted provider
// that records every byte it receives, and requests carrying sensitive values anywhere an app can
// put them. Whatever the shape, a canary never reaches the provider; clean requests of the same
// shapes do (so the test would notice an agent that simply never overflows).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startOpenAIStandin, type OpenAIStandin } from './fixtures/openai-provider.ts';
import { MODEL, openaiProvider, postJson, startStack, waitFor, type Stack } from './helpers/stack.ts';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { luhn } from '../agent/classify/checksums.ts';
import { mulberry32, type Rand } from '../shared/sim/random.ts';
import { runExplainCommand } from '../agent/cli/explain.ts';

const KEY_ENV = 'KINFERENCE_TEST_LEAK_KEY';
const BODIES = 2000;
const CONCURRENCY = 4;

// --- a seeded generator: the same 2,000 bodies on every run, so a failure replays ---------------

const pick = <T>(rand: Rand, items: readonly T[]): T => items[Math.floor(rand() * items.length)];
const digits = (rand: Rand, n: number) => Array.from({ length: n }, () => Math.floor(rand() * 10)).join('');

interface Canary {
  kind: string;
  /** How it is written into the body. */
  text: string;
  /** What must never appear in what the provider receives (compared after the same folding). */
  marker: string;
}

const fold = (s: string) =>
  s
    .normalize('NFKC')
    .replace(/[\u200b-\u200d\u2060\ufeff\s.-]/g, '')
    .toLowerCase();

function visaCard(rand: Rand): string {
  for (;;) {
    const body = `4${digits(rand, 14)}`;
    for (let check = 0; check < 10; check++) if (luhn(body + check)) return body + check;
  }
}

function iban(rand: Rand): string {
  // DE + check + 18 digits; compute the check digits (ISO 13616).
  const bban = digits(rand, 18);
  const numeric = BigInt(`${bban}131400`);
  const check = String(98n - (numeric % 97n)).padStart(2, '0');
  return `DE${check}${bban}`;
}

function ssn(rand: Rand): string {
  const area = 100 + Math.floor(rand() * 500);
  return `${area}-${10 + Math.floor(rand() * 89)}-${1000 + Math.floor(rand() * 8999)}`;
}

const fullWidth = (s: string) => s.replace(/[0-9@]/g, (c) => String.fromCharCode(c.charCodeAt(0) + 0xfee0));

function canary(rand: Rand, id: number): Canary {
  const kind = pick(rand, [
    'email',
    'email-idn',
    'email-fullwidth',
    'card',
    'card-dots',
    'card-newlines',
    'card-double',
    'card-fullwidth',
    'iban',
    'ssn',
    'phone-e164',
    'phone-uk',
    'keyword',
  ] as const);
  switch (kind) {
    case 'email':
      return { kind, text: `canary${id}@example.org`, marker: `canary${id}@example.org` };
    case 'email-idn':
      return { kind, text: `canary${id}@bücher.de`, marker: `canary${id}@bücher.de` };
    case 'email-fullwidth':
      return { kind, text: fullWidth(`canary${id}@example.org`), marker: `canary${id}@example.org` };
    case 'iban': {
      const value = iban(rand);
      return { kind, text: value.replace(/(.{4})/g, '$1 ').trim(), marker: value.toLowerCase() };
    }
    case 'ssn': {
      const value = ssn(rand);
      return { kind, text: value, marker: value.replace(/-/g, '') };
    }
    case 'phone-e164': {
      const value = `+49 30 ${digits(rand, 4)} ${digits(rand, 4)}`;
      return { kind, text: value, marker: value.replace(/\s/g, '') };
    }
    case 'phone-uk': {
      const value = `020 7${digits(rand, 3)} ${digits(rand, 4)}`;
      return { kind, text: value, marker: value.replace(/\s/g, '') };
    }
    case 'keyword':
      return { kind, text: `project BLUEBIRD-${id}`, marker: `bluebird${id}` };
    default: {
      const card = visaCard(rand);
      const groups = card.match(/.{4}/g)!;
      const sep = { card: ' ', 'card-dots': '.', 'card-newlines': '\n', 'card-double': '  ', 'card-fullwidth': ' ' }[
        kind
      ];
      const text = groups.join(sep);
      return { kind, text: kind === 'card-fullwidth' ? fullWidth(text) : text, marker: card };
    }
  }
}

const PROSE = [
  'Summarise the meeting notes.',
  'Translate this to French.',
  'What does this function return?',
  'Order 2024-0042 shipped on 2024-05-01 for $19.99.',
  'Version 2.14.3 fixed the export job.',
];
const words = (rand: Rand) => pick(rand, PROSE);

type Api = 'chat' | 'completions' | 'embeddings';
const PATHS: Record<Api, string> = {
  chat: '/v1/chat/completions',
  completions: '/v1/completions',
  embeddings: '/v1/embeddings',
};

/** Puts `value` (or, when undefined, ordinary prose) somewhere an app can put text. */
type Placement = { api: Api; name: string; build(rand: Rand, value: string | undefined): Record<string, unknown> };

const half = (s: string) => [s.slice(0, Math.ceil(s.length / 2)), s.slice(Math.ceil(s.length / 2))];
const base64 = (s: string) => Buffer.from(`${s} ${'padding '.repeat(40)}`).toString('base64');
const user = (content: unknown) => ({ role: 'user', content });
const chat = (extra: Record<string, unknown>, messages: unknown[] = [user('Hello')]) => ({
  model: MODEL,
  max_tokens: 8,
  messages,
  ...extra,
});

const PLACEMENTS: Placement[] = [
  { api: 'chat', name: 'message content', build: (r, v) => chat({}, [user(`${words(r)} ${v ?? words(r)}`)]) },
  {
    api: 'chat',
    name: 'content parts',
    build: (r, v) =>
      chat({}, [
        user([
          { type: 'text', text: words(r) },
          { type: 'text', text: v ?? words(r) },
        ]),
      ]),
  },
  {
    api: 'chat',
    name: 'split across two content parts',
    build: (r, v) => chat({}, [user((v ? half(v) : [words(r), words(r)]).map((text) => ({ type: 'text', text })))]),
  },
  {
    api: 'chat',
    name: 'messages[].name',
    build: (r, v) => chat({}, [{ role: 'user', name: v ?? 'alice', content: words(r) }]),
  },
  {
    api: 'chat',
    name: 'tool call custom input',
    build: (r, v) =>
      chat({}, [
        user('go'),
        {
          role: 'assistant',
          tool_calls: [{ id: 'c1', type: 'custom', custom: { name: 'lookup', input: v ?? words(r) } }],
        },
      ]),
  },
  {
    api: 'chat',
    name: 'tool call arguments',
    build: (r, v) =>
      chat({}, [
        user('go'),
        {
          role: 'assistant',
          tool_calls: [
            { id: 'c1', type: 'function', function: { name: 'f', arguments: JSON.stringify({ q: v ?? words(r) }) } },
          ],
        },
      ]),
  },
  {
    api: 'chat',
    name: 'prediction',
    build: (r, v) => chat({ prediction: { type: 'content', content: v ?? words(r) } }),
  },
  { api: 'chat', name: 'metadata', build: (r, v) => chat({ metadata: { note: v ?? words(r) } }) },
  {
    api: 'chat',
    name: 'response_format schema',
    build: (r, v) =>
      chat({
        response_format: {
          type: 'json_schema',
          json_schema: { name: 'out', schema: { type: 'object', description: v ?? words(r) } },
        },
      }),
  },
  {
    api: 'chat',
    name: 'vLLM documents',
    build: (r, v) => chat({ documents: [{ title: 'doc', text: v ?? words(r) }] }),
  },
  {
    api: 'chat',
    name: 'reasoning_content',
    build: (r, v) =>
      chat({}, [user('hi'), { role: 'assistant', content: 'ok', reasoning_content: v ?? words(r) }, user('go on')]),
  },
  {
    api: 'chat',
    name: 'responses-style input items',
    build: (r, v) =>
      chat({ input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: v ?? words(r) }] }] }),
  },
  {
    api: 'chat',
    name: 'unknown field, deep',
    build: (r, v) => chat({ [`x_${Math.floor(r() * 1000)}`]: { a: [{ b: { c: v ?? words(r) } }] } }),
  },
  { api: 'chat', name: 'object key', build: (r, v) => chat({ extra_body: { [v ?? 'ordinary-key']: 1 } }) },
  {
    api: 'chat',
    name: 'file content part',
    build: (r, v) =>
      chat({}, [
        user(
          v
            ? [
                { type: 'text', text: 'read this' },
                { type: 'file', file: { filename: 'a.txt', file_data: base64(v) } },
              ]
            : [{ type: 'text', text: words(r) }],
        ),
      ]),
  },
  {
    api: 'chat',
    name: 'image data URL',
    build: (r, v) =>
      chat({}, [
        user(v ? [{ type: 'image_url', image_url: { url: `data:image/png;base64,${base64(v)}` } }] : words(r)),
      ]),
  },
  {
    api: 'completions',
    name: 'prompt',
    build: (r, v) => ({ model: MODEL, max_tokens: 8, prompt: v ? `${words(r)} ${v}` : words(r) }),
  },
  {
    api: 'completions',
    name: 'prompt list',
    build: (r, v) => ({ model: MODEL, max_tokens: 8, prompt: [words(r), v ?? words(r)] }),
  },
  {
    api: 'completions',
    name: 'suffix',
    build: (r, v) => ({ model: MODEL, max_tokens: 8, prompt: words(r), suffix: v ?? words(r) }),
  },
  {
    api: 'completions',
    name: 'token ids',
    build: (r, v) => ({ model: MODEL, max_tokens: 8, prompt: v ? [...v].map((c) => c.charCodeAt(0)) : words(r) }),
  },
  { api: 'embeddings', name: 'input', build: (r, v) => ({ model: MODEL, input: v ?? words(r) }) },
  {
    api: 'embeddings',
    name: 'input split across items',
    build: (r, v) => ({ model: MODEL, input: v ? half(v) : [words(r), words(r)] }),
  },
  {
    api: 'embeddings',
    name: 'unknown field',
    build: (r, v) => ({ model: MODEL, input: words(r), user_context: { history: [v ?? words(r)] } }),
  },
];

describe('data leaves only when policy says so', () => {
  let stack: Stack;
  let provider: OpenAIStandin;

  before(async () => {
    process.env[KEY_ENV] = 'sk-leak-test';
    provider = await startOpenAIStandin({ apiKey: 'sk-leak-test' });
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
      },
    });
    // Traffic the agent never sees saturates the pod: one running, more queued behind it.
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

  const send = (api: Api, body: unknown) => postJson(`${stack.api}${PATHS[api]}`, body);
  const received = () => provider.requests.map((r) => fold(JSON.stringify(r.body)));

  /** Sends `body`; asserts it stayed on the cluster and the provider saw nothing of it. */
  async function assertStaysHome(api: Api, body: unknown, marker: string): Promise<void> {
    const before = provider.requests.length;
    const response = await send(api, body);
    await response.arrayBuffer();
    assert.notEqual(
      response.headers.get('x-kinference-route'),
      'overflow/hosted',
      `overflowed: ${JSON.stringify(body)}`,
    );
    assert.equal(provider.requests.length, before, 'the provider received a request');
    assert.ok(!received().some((text) => text.includes(fold(marker))), `marker ${marker} reached the provider`);
  }

  it(`no canary in ${BODIES} generated bodies reaches the provider; clean bodies of the same shapes do`, async () => {
    const rand = mulberry32(0x10ea4);
    const cases = Array.from({ length: BODIES }, (_, id) => {
      const placement = pick(rand, PLACEMENTS);
      const c = rand() < 0.7 ? canary(rand, id) : undefined;
      return { placement, canary: c, body: placement.build(rand, c?.text) };
    });
    let overflowedClean = 0;
    const overflowedCanaries: string[] = [];
    let next = 0;
    const worker = async () => {
      while (next < cases.length) {
        const item = cases[next++];
        const response = await send(item.placement.api, item.body);
        await response.arrayBuffer();
        const route = response.headers.get('x-kinference-route');
        if (item.canary && route === 'overflow/hosted')
          overflowedCanaries.push(`${item.canary.kind} in ${item.placement.name}`);
        else if (!item.canary && route === 'overflow/hosted') overflowedClean++;
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    assert.deepEqual(overflowedCanaries, []);
    const seen = received();
    const leaked = cases.filter((c) => c.canary && seen.some((text) => text.includes(fold(c.canary!.marker))));
    assert.deepEqual(
      leaked.map((c) => `${c.canary!.kind} in ${c.placement.name}`),
      [],
    );
    const clean = cases.filter((c) => !c.canary).length;
    // Every clean body of every shape left: the boundary is the classifier, not a stuck route.
    assert.equal(overflowedClean, clean);
    assert.equal(provider.requests.length, clean);
  });

  // --- the request shapes that leaked before (issue 10, "Why"), each by name --------------------

  const email = 'jane.doe@example.com';
  const shapes: [string, Api, unknown, string][] = [
    [
      'a custom tool call input',
      'chat',
      chat({}, [
        user('go'),
        { role: 'assistant', tool_calls: [{ id: 'c', type: 'custom', custom: { name: 'x', input: `mail ${email}` } }] },
      ]),
      email,
    ],
    ['prediction', 'chat', chat({ prediction: { type: 'content', content: email } }), email],
    ['metadata', 'chat', chat({ metadata: { owner: email } }), email],
    [
      'the response_format JSON schema text',
      'chat',
      chat({
        response_format: { type: 'json_schema', json_schema: { name: 'o', schema: { description: `cc ${email}` } } },
      }),
      email,
    ],
    ["vLLM's documents", 'chat', chat({ documents: [{ title: 't', text: email }] }), email],
    [
      'a file content part',
      'chat',
      chat({}, [
        user([
          { type: 'text', text: 'summarise' },
          { type: 'file', file: { filename: 'cv.txt', file_data: base64(email) } },
        ]),
      ]),
      email,
    ],
    [
      'reasoning_content',
      'chat',
      chat({}, [user('a'), { role: 'assistant', content: 'b', reasoning_content: email }, user('c')]),
      email,
    ],
    ['messages[].name', 'chat', chat({}, [{ role: 'user', name: email, content: 'hello' }]), email],
    [
      'an address split across two content parts',
      'chat',
      chat({}, [
        user([
          { type: 'text', text: 'jane.doe@' },
          { type: 'text', text: 'example.com' },
        ]),
      ]),
      email,
    ],
    ['a card written with dots', 'chat', chat({}, [user('pay with 4111.1111.1111.1111')]), '4111111111111111'],
    ['a card written across lines', 'chat', chat({}, [user('card:\n4111\n1111\n1111\n1111')]), '4111111111111111'],
    ['a card with double spaces', 'chat', chat({}, [user('card 4111  1111  1111  1111')]), '4111111111111111'],
    [
      'a card in full-width digits',
      'chat',
      chat({}, [user('card ４１１１ １１１１ １１１１ １１１１')]),
      '4111111111111111',
    ],
    ['a UK phone number', 'chat', chat({}, [user('ring me on 020 7946 0958')]), '02079460958'],
    ['a French phone number', 'chat', chat({}, [user('appelez le 01 23 45 67 89')]), '0123456789'],
    [
      'an internationalised e-mail domain',
      'chat',
      chat({}, [user('écrivez à josé@correo.españa')]),
      'josé@correo.españa',
    ],
  ];
  for (const [name, api, body, marker] of shapes) {
    it(`keeps data home when it sits in ${name}`, () => assertStaysHome(api, body, marker));
  }

  it('POST /explain names the detector and the JSON path, never the text', async () => {
    const response = await postJson(`${stack.admin}/explain`, chat({ metadata: { owner: email } }));
    assert.equal(response.status, 200);
    const text = await response.text();
    assert.ok(!text.includes(email));
    const e = JSON.parse(text) as {
      leave: { allowed: boolean; reason: string };
      classification: { tags: string[]; findings: { detector: string; path: string }[] };
    };
    assert.deepEqual(e.classification.findings, [{ detector: 'email', tag: 'pii', path: 'metadata.owner' }]);
    assert.equal(e.leave.allowed, false);
    assert.match(e.leave.reason, /tag pii may not leave/);
    const metrics = await (await fetch(`${stack.admin}/metrics`)).text();
    assert.match(metrics, /kinference_classified_total\{detector="email",tag="pii"\} \d+/);
    assert.match(metrics, /kinference_classified_total\{detector="codename",tag="confidential"\} \d+/);
  });

  it('POST /explain refuses what the API listener would refuse, with OpenAI-style errors', async () => {
    const cases: [string, string, number, string][] = [
      ['/explain?api=images', JSON.stringify(chat({})), 400, 'api'],
      ['/explain', '{not json', 400, 'invalid_json'],
      ['/explain', JSON.stringify({ ...chat({}), model: 'nope' }), 404, 'model_not_found'],
      ['/explain?api=embeddings', JSON.stringify(chat({})), 400, 'input'],
    ];
    for (const [path, body, status, what] of cases) {
      const response = await postJson(`${stack.admin}${path}`, body);
      assert.equal(response.status, status, path);
      const e = (await response.json()) as { error: { message: string; param: string | null; code: string | null } };
      assert.ok(e.error.param === what || e.error.code === what, `${path}: ${JSON.stringify(e)}`);
    }
  });

  it('`kinference explain --body FILE` prints the tags, each detector and its path, never the text', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kinference-explain-'));
    const file = join(dir, 'body.json');
    writeFileSync(
      file,
      JSON.stringify(
        chat({ metadata: { owner: email } }, [
          user([
            { type: 'text', text: 'see' },
            { type: 'image_url', image_url: { url: 'https://x/y.png' } },
          ]),
        ]),
      ),
    );
    const lines: string[] = [];
    const log = console.log;
    console.log = (line: string) => lines.push(line);
    try {
      assert.equal(await runExplainCommand(['--admin', stack.admin, '--body', file, '--tags', 'internal']), 0);
    } finally {
      console.log = log;
      rmSync(dir, { recursive: true, force: true });
    }
    const out = lines.join('\n');
    assert.match(out, /tags: {5}internal, pii, unscanned/);
    assert.match(out, /email +→ pii +at metadata\.owner/);
    assert.match(out, /unscanned \(media\) at messages\[0\]\.content\[1\]/);
    assert.ok(!out.includes(email));
  });

  it('`kinference explain --body` names the decoded form that fired and the seam, and classifies --header values', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kinference-explain-'));
    const file = join(dir, 'body.json');
    const token = ['{"alg":"HS256"}', JSON.stringify({ email }), 'sig']
      .map((part) => Buffer.from(part).toString('base64url'))
      .join('.');
    const [local, domain] = email.split('@');
    writeFileSync(
      file,
      JSON.stringify(
        chat({ metadata: { session: token } }, [user(`write to ${local}`), user(`@${domain} today`), user('hello')]),
      ),
    );
    const lines: string[] = [];
    const log = console.log;
    console.log = (line: string) => lines.push(line);
    try {
      const args = ['--admin', stack.admin, '--body', file, '--header', `x-request-id: ${email}`];
      assert.equal(await runExplainCommand(args), 0);
    } finally {
      console.log = log;
      rmSync(dir, { recursive: true, force: true });
    }
    const out = lines.join('\n');
    assert.match(out, /email +→ pii +at header:x-request-id\n/);
    assert.match(out, /email +→ pii +at metadata\.session \(decoded: base64\)/);
    assert.match(out, /email +→ pii +at messages \(across the items\)/);
    assert.ok(!out.includes(email) && !out.includes(local) && !out.includes(token));
  });
});
