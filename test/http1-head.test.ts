// The API listener's request-head parser and body framing (agent/server/http1/): a table of heads
// it accepts and refuses, request-smuggling shapes among them, each with the status it answers.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseRequestHead, type HeadLimits } from '../agent/server/http1/head.ts';
import { BodyFraming } from '../agent/server/http1/body.ts';

const LIMITS: HeadLimits = { maxHeaders: 20, maxTargetBytes: 64 };
const head = (lines: string[]) => lines.join('\r\n');
const post = (...fields: string[]) => head(['POST /v1/chat/completions HTTP/1.1', 'Host: agent', ...fields]);

test('accepts plain requests and reads their framing, keep-alive and expectation', () => {
  const cases: [string, { body: number | 'chunked'; keepAlive: boolean; expectContinue?: boolean; minor?: 0 | 1 }][] = [
    [post('Content-Length: 12'), { body: 12, keepAlive: true }],
    [post(), { body: 0, keepAlive: true }],
    [post('Transfer-Encoding: chunked'), { body: 'chunked', keepAlive: true }],
    [post('transfer-encoding:  Chunked  '), { body: 'chunked', keepAlive: true }],
    [post('Content-Length: 5', 'Content-Length: 5'), { body: 5, keepAlive: true }],
    [post('Content-Length: 5, 5'), { body: 5, keepAlive: true }],
    [post('Content-Length: 5', 'Content-Length: 5 , 5'), { body: 5, keepAlive: true }],
    [post('Content-Length: 123456789012345'), { body: 123456789012345, keepAlive: true }],
    [post('Connection: close', 'Content-Length: 1'), { body: 1, keepAlive: false }],
    [post('Connection: Keep-Alive, Close'), { body: 0, keepAlive: false }],
    [post('Expect: 100-continue', 'Content-Length: 3'), { body: 3, keepAlive: true, expectContinue: true }],
    [head(['GET /v1/models HTTP/1.0']), { body: 0, keepAlive: false, minor: 0 }],
    [head(['GET /v1/models HTTP/1.0', 'Connection: keep-alive']), { body: 0, keepAlive: true, minor: 0 }],
    [
      head(['HEAD /v1/models HTTP/1.1', 'Host: a', 'Upgrade: h2c', 'Connection: Upgrade']),
      { body: 0, keepAlive: true },
    ],
    [`\r\n\r\n${post('Content-Length: 2')}`, { body: 2, keepAlive: true }],
  ];
  for (const [text, want] of cases) {
    const parsed = parseRequestHead(text, LIMITS);
    assert.ok(!('status' in parsed), `${JSON.stringify(text)} was refused: ${JSON.stringify(parsed)}`);
    assert.equal(parsed.body, want.body, JSON.stringify(text));
    assert.equal(parsed.keepAlive, want.keepAlive, JSON.stringify(text));
    assert.equal(parsed.expectContinue, want.expectContinue ?? false, JSON.stringify(text));
    assert.equal(parsed.minor, want.minor ?? 1, JSON.stringify(text));
  }
});

test('reads the request line and fields as sent: names lowercased, values trimmed, repeats joined', () => {
  const parsed = parseRequestHead(
    head([
      'POST /v1/chat/completions?x=1 HTTP/1.1',
      'Host: agent',
      'X-Request-Id:  abc \t',
      'x-kinference-tags: a',
      'X-Kinference-Tags: b',
      'X-Empty:',
      'X-Obs: caf\xe9',
    ]),
    LIMITS,
  );
  assert.ok(!('status' in parsed));
  assert.equal(parsed.method, 'POST');
  assert.equal(parsed.target, '/v1/chat/completions?x=1');
  assert.equal(parsed.fields['x-request-id'], 'abc');
  assert.equal(parsed.fields['x-kinference-tags'], 'a, b');
  assert.equal(parsed.fields['x-empty'], '');
  assert.equal(parsed.fields['x-obs'], 'caf\xe9');
  assert.equal(parsed.fields['host'], 'agent');
});

test('refuses smuggling shapes, malformed lines and what it cannot frame, each with its status', () => {
  const cases: [string, string, number][] = [
    // Framing that two parsers could read differently.
    ['TE and CL together', post('Transfer-Encoding: chunked', 'Content-Length: 4'), 400],
    ['CL and TE together', post('Content-Length: 4', 'Transfer-Encoding: chunked'), 400],
    ['differing Content-Length', post('Content-Length: 4', 'Content-Length: 5'), 400],
    ['differing Content-Length in a list', post('Content-Length: 4, 5'), 400],
    ['a plain Content-Length and a differing list', post('Content-Length: 4', 'Content-Length: 5, 5'), 400],
    ['a list and a differing plain Content-Length', post('Content-Length: 4, 4', 'Content-Length: 5'), 400],
    ['signed Content-Length', post('Content-Length: +4'), 400],
    ['hex Content-Length', post('Content-Length: 0x4'), 400],
    ['empty Content-Length', post('Content-Length:'), 400],
    ['huge Content-Length', post('Content-Length: 1234567890123456'), 400],
    ['chunked not last', post('Transfer-Encoding: chunked, gzip'), 400],
    ['chunked twice', post('Transfer-Encoding: chunked', 'Transfer-Encoding: chunked'), 400],
    ['unknown coding before chunked', post('Transfer-Encoding: gzip, chunked'), 501],
    ['a coding that is not chunked', post('Transfer-Encoding: identity'), 400],
    ['TE with a near-miss value', post('Transfer-Encoding: xchunked'), 400],
    ['TE in HTTP/1.0', head(['POST / HTTP/1.0', 'Transfer-Encoding: chunked']), 400],
    ['space before the colon', post('Transfer-Encoding : chunked'), 400],
    ['tab before the colon', post('Content-Length\t: 4'), 400],
    ['obs-fold', post('X-A: a', ' folded'), 400],
    ['obs-fold of Transfer-Encoding', post('Transfer-Encoding:', ' chunked'), 400],
    // Line ends.
    ['bare LF between fields', 'POST / HTTP/1.1\r\nHost: a\nContent-Length: 4', 400],
    ['bare LF after the request line', 'POST / HTTP/1.1\nHost: a', 400],
    ['bare CR in a value', post('X-A: a\rb'), 400],
    ['bare CR ending a field', post('X-A: a\r', 'X-B: b'), 400],
    // Characters.
    ['NUL in a value', post('X-A: a\0b'), 400],
    ['DEL in a value', post('X-A: a\x7fb'), 400],
    ['control character in a value', post('X-A: a\x01b'), 400],
    ['non-token field name', post('X A: b'), 400],
    ['empty field name', post(': b'), 400],
    ['non-token method', head(['PO(ST / HTTP/1.1', 'Host: a']), 400],
    ['non-ASCII in the target', head(['GET /caf\xe9 HTTP/1.1', 'Host: a']), 400],
    ['control character in the target', head(['GET /a\x01 HTTP/1.1', 'Host: a']), 400],
    ['two spaces in the request line', head(['GET  / HTTP/1.1', 'Host: a']), 400],
    ['no version', head(['GET /', 'Host: a']), 400],
    ['lowercase version', head(['GET / http/1.1', 'Host: a']), 400],
    ['version with trailing garbage', head(['GET / HTTP/1.1x', 'Host: a']), 400],
    ['empty head', '', 400],
    // Versions, hosts, methods, expectations, limits.
    ['HTTP/2 in 1.1 syntax', head(['GET / HTTP/2.0', 'Host: a']), 505],
    ['HTTP/1.2', head(['GET / HTTP/1.2', 'Host: a']), 505],
    ['HTTP/1.1 without Host', head(['GET / HTTP/1.1']), 400],
    ['two Hosts', post('Host: b'), 400],
    ['two Hosts in HTTP/1.0', head(['GET / HTTP/1.0', 'Host: a', 'Host: b']), 400],
    ['CONNECT', head(['CONNECT agent:443 HTTP/1.1', 'Host: agent:443']), 501],
    ['an expectation other than 100-continue', post('Expect: 200-ok'), 417],
    ['target over maxTargetBytes', head([`GET /${'a'.repeat(64)} HTTP/1.1`, 'Host: a']), 414],
    ['more fields than maxHeaders', post(...Array.from({ length: 20 }, (_, i) => `X-${i}: v`)), 431],
  ];
  for (const [name, text, status] of cases) {
    const parsed = parseRequestHead(text, LIMITS);
    assert.ok('status' in parsed, `${name} was accepted`);
    assert.equal(parsed.status, status, `${name}: ${parsed.message}`);
  }
});

/** Feeds `bytes` to a framing in pieces of `step` bytes; returns the body, the index after it, or the refusal. */
function frame(framing: number | 'chunked', bytes: string, step: number, maxLineBytes = 64) {
  const f = new BodyFraming(framing, maxLineBytes);
  const buf = Buffer.from(bytes, 'latin1');
  let body = '';
  for (let at = 0; at < buf.length; at += step) {
    const end = Math.min(buf.length, at + step);
    const next = f.read(buf, at, end);
    if (typeof next === 'string') return { refused: next };
    for (let s = 0; s < f.segments.length; s += 2) body += buf.toString('latin1', f.segments[s], f.segments[s + 1]);
    if (f.ended) return { body, rest: buf.toString('latin1', next) };
  }
  return { body, open: true };
}

test('reads chunked and Content-Length bodies split anywhere, and leaves what follows for the next request', () => {
  const chunked =
    '4\r\nWiki\r\n5;name="x y"\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nTrailer: t\r\n\r\nGET / HTTP/1.1';
  for (const step of [1, 2, 3, 7, 1000]) {
    assert.deepEqual(frame('chunked', chunked, step), { body: 'Wikipedia in\r\n\r\nchunks.', rest: 'GET / HTTP/1.1' });
    assert.deepEqual(frame(5, 'hello NEXT', step), { body: 'hello', rest: ' NEXT' });
  }
  assert.deepEqual(frame('chunked', '0\r\n\r\n', 1), { body: '', rest: '' });
  assert.deepEqual(frame(3, 'ab', 1), { body: 'ab', open: true });
});

// Malformed chunked framing: test/http1-chunked.test.ts, the same table for every reader.
