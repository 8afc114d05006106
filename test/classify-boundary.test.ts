// The classifier fails closed: every string at any depth is read (normalised first), what cannot
// be read is `unscanned`, the work is bounded, and platform detectors are safe to run on text
// an attacker writes.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { classify, classifyRequest, withForwardedHeaders } from '../agent/classify/classify.ts';
import { backtrackingHazard, compileDetectors } from '../agent/classify/custom.ts';
import { detect } from '../agent/classify/detect.ts';
import { normalise } from '../agent/classify/normalise.ts';
import { DEFAULT_SCAN_LIMITS } from '../agent/classify/walk.ts';
import { ORDINARY_PROMPTS } from './fixtures/ordinary-prompts.ts';

const EMAIL = 'jane.doe@example.com';

describe('every string, any depth', () => {
  it('reads unknown fields, deep nesting, object keys and long integers', () => {
    assert.deepEqual(classifyRequest(undefined, { a: { b: [{ c: { d: [`x ${EMAIL}`] } }] } }).findings, [
      { detector: 'email', tag: 'pii', path: 'a.b[0].c.d[0]' },
    ]);
    assert.deepEqual(classifyRequest(undefined, { metadata: { [EMAIL]: true } }).findings, [
      { detector: 'email', tag: 'pii', path: `metadata["${EMAIL}"]` },
    ]);
    assert.deepEqual(classifyRequest(undefined, { extra: { card: 4111111111111111 } }).detectors, ['card']);
    assert.deepEqual(
      classify(undefined, { model: 'm', seed: 42, max_tokens: 100000, logit_bias: { 50256: -100 } }),
      [],
    );
  });

  it('matches a value split across parts, however many, at the seam only', () => {
    const parts = (...texts: string[]) => ({
      messages: [{ role: 'user', content: texts.map((text) => ({ type: 'text', text })) }],
    });
    assert.deepEqual(classify(undefined, parts('mail jane.doe', '@exam', 'ple.com now')), ['pii']);
    assert.deepEqual(classify(undefined, parts('x '.repeat(2500), '4111 1111 ', '1111 1111', ' y'.repeat(2500))), [
      'pii',
    ]);
    assert.deepEqual(classify(undefined, { input: ['+44 20 79', '46 0958'] }), ['pii']);
    assert.deepEqual(classify(undefined, parts('order 2024', '-05-01 shipped')), []);
  });

  it('tags what it cannot read as unscanned, naming why and where', () => {
    const u = (body: unknown) => classifyRequest(undefined, body).unscanned;
    assert.deepEqual(
      u({
        messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }] }],
      }),
      [
        { reason: 'media', path: 'messages[0].content[0]' },
        { reason: 'media', path: 'messages[0].content[0].input_audio' },
      ],
    );
    assert.deepEqual(u({ doc: 'QUJD'.repeat(100) }), [{ reason: 'blob', path: 'doc' }]);
    assert.deepEqual(u({ doc: 'data:text/plain,hello' }), [{ reason: 'blob', path: 'doc' }]);
    assert.deepEqual(u({ prompt: [1, 2, 3] }), [{ reason: 'token-ids', path: 'prompt' }]);
    assert.deepEqual(u({ whatever: Array.from({ length: 40 }, (_, i) => i) }), [
      { reason: 'token-ids', path: 'whatever' },
    ]);
    // Short integer lists elsewhere are parameters, not prompts.
    assert.deepEqual(u({ stop_token_ids: [128001, 128009] }), []);
    // Prose that merely starts with "data:" is text.
    assert.deepEqual(classify(undefined, { note: 'data: the quarterly numbers look fine' }), []);
  });

  it('bounds the work: past the depth, node or character limit the request is unscanned, never skipped silently', () => {
    let deep: unknown = EMAIL;
    for (let i = 0; i < DEFAULT_SCAN_LIMITS.maxDepth + 5; i++) deep = { x: deep };
    assert.deepEqual(classifyRequest(undefined, deep).tags, ['unscanned']);
    assert.equal(classifyRequest(undefined, deep).unscanned[0].reason, 'depth');
    const limits = { maxDepth: 32, maxChars: 10_000, maxNodes: 1000 };
    assert.deepEqual(classify(undefined, { a: 'z '.repeat(6000) }, { limits }), ['unscanned']);
    assert.deepEqual(classify(undefined, { a: Array.from({ length: 2000 }, () => 'hello!') }, { limits }), [
      'unscanned',
    ]);
    assert.deepEqual(classify(undefined, { a: 'z '.repeat(4000) }, { limits }), []);
  });
});

describe('normalisation', () => {
  it('folds full-width characters, drops invisible ones, reads JSON escapes and Unicode dashes', () => {
    assert.deepEqual([...detect('ｊａｎｅ＠ｅｘａｍｐｌｅ．ｃｏｍ')], ['email']);
    assert.deepEqual([...detect('4111\u200b1111\u200b1111\u200b1111 is mine')], ['card']);
    assert.deepEqual([...detect('ssn 536\u201090\u20114399')], ['ssn']);
    assert.deepEqual([...detect('{"to":"jane\\u0040example.com"}')], ['email']);
    assert.deepEqual([...detect('{"card":"4111\\n1111\\n1111\\n1111"}')], ['card']);
    assert.equal(normalise('plain ascii'), 'plain ascii');
  });

  it('reads cards, IBANs and phones written with dots, line breaks, double spaces', () => {
    for (const text of [
      '4111.1111.1111.1111',
      '4111\n1111\n1111\n1111',
      '4111  1111  1111  1111',
      '4111 - 1111 - 1111 - 1111',
    ]) {
      assert.deepEqual([...detect(`pay ${text} today`)], ['card'], JSON.stringify(text));
    }
    assert.deepEqual([...detect('IBAN DE89-3704-0044-0532-0130-00')], ['iban']);
    assert.deepEqual([...detect('IBAN DE89\n3704\n0044\n0532\n0130\n00')], ['iban']);
    for (const text of ['020 7946 0958', '01 23 45 67 89', '030-12345678', '0412 345 678', '+33 1 23 45 67 89']) {
      assert.deepEqual([...detect(`call ${text}`)], ['phone'], text);
    }
  });

  it('finds internationalised addresses and leaves the checksums in charge', () => {
    for (const text of ['josé@correo.españa', 'user@bücher.de', '用户@例子.广告', 'info@xn--bcher-kva.de'])
      assert.deepEqual([...detect(`to ${text}`)], ['email'], text);
    // A failing Luhn stays untagged however it is spaced.
    assert.deepEqual([...detect('4111.1111.1111.1112')], []);
    assert.deepEqual([...detect('part 0123-4567-89')], []);
  });
});

describe('false positives on ordinary prompts', () => {
  it(`tags at most 0.5% of the ${ORDINARY_PROMPTS.length} ordinary prompts, alone or as consecutive messages`, () => {
    const tagged = (body: unknown) => classifyRequest(undefined, body).tags.length > 0;
    const flagged = ORDINARY_PROMPTS.filter((text) => tagged({ messages: [{ role: 'user', content: text }] }));
    assert.ok(flagged.length <= ORDINARY_PROMPTS.length * 0.005, flagged.join('\n'));
    // The lottery draw is shaped exactly like a French number; random 16-digit ids pass Luhn one time in ten.
    assert.ok(flagged.includes('The lottery drew 04 11 23 35 42 and bonus 07.'));
    for (const text of flagged) assert.match(text, /lottery|txn=|I got \d{16}/);
    // Reading across the seam between two clean messages adds nothing.
    const seams = ORDINARY_PROMPTS.slice(1).filter(
      (text, i) =>
        !flagged.includes(text) &&
        !flagged.includes(ORDINARY_PROMPTS[i]) &&
        tagged({
          messages: [
            { role: 'user', content: ORDINARY_PROMPTS[i] },
            { role: 'user', content: text },
          ],
        }),
    );
    assert.deepEqual(seams, []);
  });
});

describe('decoded forms and the evidence they leave', () => {
  const findings = (body: unknown, headers?: Record<string, string>) =>
    classifyRequest(undefined, body, { headers }).findings;
  const content = (text: string) => ({ messages: [{ role: 'user', content: text }] });

  it('folds the decimal digits of every script and drops every default-ignorable code point', () => {
    // Arabic-Indic, Extended Arabic-Indic, Devanagari, Bengali, Thai, Myanmar, Adlam.
    for (const zero of [0x660, 0x6f0, 0x966, 0x9e6, 0xe50, 0x1040, 0x1e950]) {
      const digits = '4111111111111111'.replace(/\d/g, (d) => String.fromCodePoint(zero + Number(d)));
      assert.deepEqual([...detect(`card ${digits}`)], ['card'], zero.toString(16));
    }
    for (const mark of ['\u200e', '\u200f', '\u2063', '\u034f', '\ufe0f', '\u{e0041}', '\u061c', '\u115f'])
      assert.deepEqual([...detect(`jane${mark}.doe@exam${mark}ple.com`)], ['email'], mark.codePointAt(0)!.toString(16));
    assert.deepEqual(findings(content('٥٣٦-٩٠-٤٣٩٩')), [
      { detector: 'ssn', tag: 'pii', path: 'messages[0].content', via: 'unicode' },
    ]);
  });

  it('undoes JSON escapes two deep, URL escapes, HTML entities and base64 spans, and names the decoding', () => {
    const inner = '{"to":"jane\\u0040example.com"}';
    assert.deepEqual(findings(content(JSON.stringify({ result: inner }))), [
      { detector: 'email', tag: 'pii', path: 'messages[0].content', via: 'json-escapes' },
    ]);
    const jwt = ['{"alg":"HS256"}', '{"email":"jane@example.com"}', 'sig']
      .map((part) => Buffer.from(part).toString('base64url'))
      .join('.');
    const cases: [string, string][] = [
      ['https://crm.example/?q=jane.doe%40example.com', 'url'],
      ['jane.doe&commat;example&period;com', 'html'],
      ['jane.doe&#x40;example.com', 'html'],
      [`Bearer ${jwt}`, 'base64'],
      [`id ${Buffer.from('card 4111 1111 1111 1111').toString('base64')}`, 'base64'],
      [`ssn ${Buffer.from('536-90-4399').toString('base64')}`, 'base64'],
    ];
    for (const [text, via] of cases) assert.equal(findings(content(text))[0]?.via, via, text);
    // Base64 of binary (hashes, keys) and long words are passed over, not decoded into noise.
    assert.deepEqual(findings(content(`sha256 ${Buffer.alloc(32, 7).toString('base64')} internationalization`)), []);
  });

  it('reads SSNs written with spaces or dots when they stand alone, and negative numbers', () => {
    assert.deepEqual([...detect('SSN 287 65 4321.')], ['ssn']);
    assert.deepEqual([...detect('ssn: 287.65.4321')], ['ssn']);
    assert.deepEqual([...detect('series 12 287 65 4321 99')], []);
    assert.deepEqual(classifyRequest(undefined, { metadata: { ref: -4111111111111111 } }).detectors, ['card']);
    assert.deepEqual([...detect('{"account": -4111111111111111}')], ['card']);
  });

  it('reads across messages, a name and its content, and /v1/responses input items, and says so', () => {
    assert.deepEqual(
      findings({
        messages: [
          { role: 'user', content: 'mail jane.doe' },
          { role: 'user', content: '@example.com now' },
        ],
      }),
      [{ detector: 'email', tag: 'pii', path: 'messages', seam: true }],
    );
    assert.deepEqual(findings({ messages: [{ role: 'user', name: 'jane.doe', content: '@example.com says hi' }] }), [
      { detector: 'email', tag: 'pii', path: 'messages', seam: true },
    ]);
    const item = (text: string) => ({ role: 'user', content: [{ type: 'input_text', text }] });
    assert.deepEqual(findings({ input: [item('card 4111 1111'), item('1111 1111 thanks')] }), [
      { detector: 'card', tag: 'pii', path: 'input', seam: true },
    ]);
  });

  it('classifies the header values a provider would receive, and only those', () => {
    assert.deepEqual(findings({}, { 'x-request-id': 'jane.doe@example.com', baggage: 'mail=jane.doe@example.com' }), [
      { detector: 'email', tag: 'pii', path: 'header:x-request-id' },
    ]);
    assert.deepEqual(findings({}, { tracestate: `vendor=${Buffer.from('jane@example.com').toString('base64')}` }), [
      { detector: 'email', tag: 'pii', path: 'header:tracestate', via: 'base64' },
    ]);
    const body = classifyRequest(undefined, content('hello there'));
    const merged = withForwardedHeaders(body, { 'x-request-id': '4111-1111-1111-1111' });
    assert.deepEqual([merged.tags, merged.detectors], [['pii'], ['card']]);
    assert.equal(withForwardedHeaders(body, { 'x-request-id': 'req-42' }), body);
  });
});

describe('platform detectors', () => {
  const { detectors, errors } = compileDetectors([
    { name: 'codename', tag: 'confidential', keywords: ['Bluebird', 'project  falcon'] },
    { name: 'employee-id', tag: 'internal', pattern: 'EMP-[0-9]{6}\\b' },
  ]);

  it('tag requests by keyword (case-insensitive, normalised) and by pattern, on any path', () => {
    assert.deepEqual(errors, []);
    const c = classifyRequest(
      undefined,
      { metadata: { note: 'about ＢＬＵＥＢＩＲＤ' }, messages: [{ role: 'user', content: 'ask EMP-123456 now' }] },
      { detectors },
    );
    assert.deepEqual(c.tags, ['confidential', 'internal']);
    assert.deepEqual(c.custom, ['codename', 'employee-id']);
    assert.deepEqual(
      c.findings.map((f) => [f.detector, f.path]),
      [
        ['codename', 'metadata.note'],
        ['employee-id', 'messages[0].content'],
      ],
    );
    assert.deepEqual(classify(undefined, { input: 'EMP-12345 is too short' }, { detectors }), []);
  });

  it('find a match that straddles the slices a long text is cut into', () => {
    const text = `${'a '.repeat(1020)}EMP-654321${' b'.repeat(3000)}`;
    assert.deepEqual(classify(undefined, { input: text }, { detectors }), ['internal']);
  });

  it('are refused at load when invalid, empty-matching, or able to backtrack without end', () => {
    const problems = compileDetectors([
      { name: 'a', tag: 't', pattern: '(' },
      { name: 'b', tag: 't', pattern: '(a+)+$' },
      { name: 'c', tag: 't', pattern: '(a|aa)*b' },
      { name: 'd', tag: 't', pattern: '(\\w)\\1' },
      { name: 'e', tag: 't', pattern: 'x*' },
      { name: 'f', tag: 't' },
      { name: 'Bad Name', tag: 't', keywords: ['x'] },
      { name: 'g', tag: 'T!', keywords: ['x'] },
    ]).errors;
    assert.equal(problems.length, 8, problems.join('\n'));
    assert.match(problems[0], /detectors\[0\] \(a\): pattern is not a valid regular expression/);
    assert.match(problems[1], /may take exponential time \(a repeated group that itself repeats or alternates\)/);
    assert.match(problems[2], /exponential time/);
    assert.match(problems[3], /a back-reference/);
    assert.match(problems[4], /matches the empty string/);
    assert.match(problems[5], /needs keywords or a pattern/);
  });

  it('accept the linear shapes people write', () => {
    for (const p of ['EMP-[0-9]{6}', '(?:foo|bar)-\\d+', '\\b[A-Z]{2}\\d{4}\\b', '(ab)+c', '(?<id>x{2,3})', '[(a+)+]'])
      assert.equal(backtrackingHazard(p), undefined, p);
  });

  it('and the classification bounds are settings', async () => {
    const { settingsFromObject } = await import('../agent/config/load.ts');
    const base = {
      node: 'n',
      listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0' },
      pods: [{ name: 'p', address: '127.0.0.1:1', models: ['m'] }],
    };
    const { limits } = settingsFromObject(
      { ...base, limits: { classifyMaxChars: 65536, classifyMaxDepth: 8, classifyMaxValues: 500 } },
      'test',
      {},
    );
    assert.deepEqual([limits.classifyMaxChars, limits.classifyMaxDepth, limits.classifyMaxValues], [65536, 8, 500]);
    assert.deepEqual(settingsFromObject(base, 'test', {}).limits.classifyMaxValues, DEFAULT_SCAN_LIMITS.maxNodes);
    assert.throws(
      () => settingsFromObject({ ...base, limits: { classifyMaxDepth: 1000 } }, 'test', {}),
      /limits\.classifyMaxDepth/,
    );
  });

  it('are rejected by the config loader with the detector named', async () => {
    const { settingsFromObject } = await import('../agent/config/load.ts');
    assert.throws(
      () =>
        settingsFromObject(
          {
            node: 'n',
            listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0' },
            pods: [{ name: 'p', address: '127.0.0.1:1', models: ['m'] }],
            detectors: [{ name: 'evil', tag: 'x', pattern: '(x+x+)+y' }],
          },
          'test',
          {},
        ),
      /detectors\[0\] \(evil\): pattern may take exponential time/,
    );
  });
});
