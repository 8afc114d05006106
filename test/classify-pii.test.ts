import { test } from 'node:test';
import assert from 'node:assert/strict';
import { detect, type Detector } from '../agent/classify/detect.ts';
import { luhn, mod97 } from '../agent/classify/checksums.ts';
import { classify, classifyRequest } from '../agent/classify/classify.ts';

function detected(text: string): Detector[] {
  return [...detect(text)].sort();
}

function assertFinds(kind: Detector, texts: string[]): void {
  for (const text of texts) assert.deepEqual(detected(text), [kind], `expected ${kind} in ${JSON.stringify(text)}`);
}

function assertClean(texts: string[]): void {
  for (const text of texts) assert.deepEqual(detected(text), [], `expected nothing in ${JSON.stringify(text)}`);
}

// --- positives, embedded in prose ---

test('finds e-mail addresses', () => {
  assertFinds('email', [
    'Please reply to jane.doe@example.com.',
    'Contact: "Bob" <bob+billing@mail.example.co.uk>, thanks',
    'mailto:first_last@sub-domain.example.org?subject=hi',
    'JANE@EXAMPLE.COM wrote:',
  ]);
});

test('finds payment card numbers that pass Luhn with a known issuer', () => {
  assertFinds('card', [
    'my card is 4111 1111 1111 1111, exp 12/26',
    'charge 4111-1111-1111-1111 please',
    'number:4111111111111111.',
    'Mastercard 5555 5555 5555 4444 and nothing else',
    'amex 3782 822463 10005',
    'amex 378282246310005',
    'discover 6011111111111117',
    'jcb 3530 1113 3330 0000',
    'mc 2-series 2223 0031 2200 3222',
    'diners 30569309025904',
    'the number (4012888888881881) was declined',
    'numéro de carte\u00a04111 1111 1111 1111',
  ]);
});

test('finds US SSNs in the dashed form', () => {
  assertFinds('ssn', [
    'SSN: 536-90-4399',
    'ssn=078-05-1120 on file',
    'his number (219-09-9999) is on the form',
    'numbers 536-90-4399 7 and more',
    'SSN 536-90-4399,DOB on file',
    '{"ssn":"536-90-4399"}',
  ]);
});

test('finds IBANs that pass mod-97, compact or grouped by 4', () => {
  assertFinds('iban', [
    'wire it to DE89 3704 0044 0532 0130 00 today',
    'IBAN: DE89370400440532013000',
    'GB82 WEST 1234 5698 7654 32.',
    'FR14 2004 1010 0505 0001 3M02 606',
    'NL91ABNA0417164300',
    'CH93 0076 2011 6238 5295 7',
    'BE68 5390 0754 7034, ok?',
  ]);
});

test('finds phone numbers in E.164 and common NANP shapes', () => {
  assertFinds('phone', [
    'call +1 415 555 2671 tomorrow',
    'call +14155552671',
    'UK office: +44 20 7946 0958',
    'UK office: +44 (0)20 7946 0958',
    'Paris +33 1 23 45 67 89.',
    'US: +1 (415) 555-2671',
    'ring (555) 123-4567 after 5',
    'ring (555)123-4567',
    'cell 555-123-4567.',
    'cell 555.123.4567',
    'toll free 1-800-555-0199',
  ]);
});

test('finds several kinds in one text', () => {
  assert.deepEqual(
    detected('jane@example.com, 555-123-4567, SSN 536-90-4399, card 4111111111111111, DE89370400440532013000'),
    ['card', 'email', 'iban', 'phone', 'ssn'],
  );
});

// --- near misses ---

test('order numbers, ids and 16-digit numbers failing Luhn or issuer are not cards', () => {
  assertClean([
    'order 4111111111111112 shipped', // Visa prefix, fails Luhn
    'order 1234567812345670 shipped', // passes Luhn, no issuer starts with 1
    'tracking 9400111899223197428490',
    'Order #4111111111111111', // an id after #
    'ORD-2024-000123',
    'invoice INV-4111111111111111',
    'ref 4111-1111-1111-1111-9', // a longer dashed id
    'account 4111 1111 111', // too short
    'ts 1714566645123 ms',
    'id=41111111111111110000', // 20 digits
  ]);
});

test('timestamps, dates, versions and addresses are not PII', () => {
  assertClean([
    'at 2024-05-01T12:30:45Z the job failed',
    'at 2024-05-01T12:30:45.123+02:00',
    'on 2024-05-01 and 05/01/2024 and 1 May 2024',
    'version 1.2.3, v10.0.19045, build 10.0.19045.3803',
    'host 192.168.1.254 and 10.0.0.1:8080, IPv6 2001:db8::1',
    'chrome/124.0.6367.207 safari/537.36',
  ]);
});

test('UUIDs, hashes and prices are not PII', () => {
  assertClean([
    'request 123e4567-e89b-12d3-a456-426614174000',
    'request 12345678-1234-1234-1234-123456789012',
    'sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08',
    'commit 4111111111111111a2b3c4d5e6f708192a3b4c5d',
    'it costs $1,234.56 or €4111.11 or 4111,11 EUR',
    'total: 5,555,123,456.78',
  ]);
});

test('things near an e-mail address are not e-mail addresses', () => {
  assertClean([
    'ping user@ when done',
    'user@localhost is local',
    '@mention and @org/package',
    'icon@2x.png and logo@3x.jpg',
    'git clone git@github.com:org/repo.git',
    'npm i lodash@4.17.21 react@latest',
    'docker pull nginx@sha256:abc123',
    'a@b.c is too short a domain',
  ]);
});

test('SSN-shaped numbers with invalid parts are not SSNs', () => {
  assertClean([
    'ssn 000-12-3456',
    'ssn 666-12-3456',
    'ssn 912-34-5678',
    'ssn 123-00-4567',
    'ssn 123-45-0000',
    'ssn 123456789', // only the dashed form
    'part A-123-45-6789',
    'serial 123-45-67890',
  ]);
});

test('IBAN-shaped strings failing mod-97 or length are not IBANs', () => {
  assertClean([
    'DE89 3704 0044 0532 0130 01', // check digits wrong
    'DE89370400440532013', // too short for DE
    'XX89370400440532013000', // no such country
    'ID DE89370400440532013000X', // part of a longer token
    'sku AB12CDEFGH345678',
  ]);
});

test('phone-shaped numbers that are not phones are not tagged', () => {
  assertClean([
    'x +1 2 3 4 5 6 7 8 = 36',
    'delta +5 points',
    'range 100-200-3000', // area code cannot start with 1
    'ISBN 978-3-16-148410-0',
    'ORD-555-123-4567',
    '#555-123-4567',
    'items 555 123 4567', // spaces only: a list of numbers
    'score 2+14155552671',
    '(123) 456-7890', // area code cannot start with 1
  ]);
});

test('Luhn and mod-97 arithmetic', () => {
  assert.equal(luhn('4111111111111111'), true);
  assert.equal(luhn('4111111111111112'), false);
  assert.equal(luhn('79927398713'), true);
  assert.equal(mod97('GB82WEST12345698765432'), 1);
  assert.equal(mod97('GB83WEST12345698765432'), 2);
});

// --- where in a request ---

test('finds PII in chat content parts and tool call arguments', () => {
  const parts = {
    messages: [
      { role: 'system', content: 'You are helpful.' },
      {
        role: 'user',
        content: [
          { type: 'image_url', image_url: { url: 'https://x/y.png' } },
          { type: 'text', text: 'I am at jane@example.com' },
        ],
      },
    ],
  };
  assert.deepEqual(classify(undefined, parts), ['pii', 'unscanned']);
  const tool = {
    messages: [
      { role: 'user', content: 'book it' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: '1', type: 'function', function: { name: 'book', arguments: '{"card":"4111 1111 1111 1111"}' } },
        ],
      },
    ],
  };
  assert.deepEqual(classifyRequest(undefined, tool).detectors, ['card']);
});

test('finds PII in a completions prompt array and in embeddings input', () => {
  assert.deepEqual(classifyRequest(undefined, { prompt: ['hello', 'SSN 536-90-4399'] }).detectors, ['ssn']);
  assert.deepEqual(classifyRequest(undefined, { prompt: 'call +1 415 555 2671' }).detectors, ['phone']);
  assert.deepEqual(classifyRequest(undefined, { input: ['fine', 'IBAN DE89 3704 0044 0532 0130 00'] }).detectors, [
    'iban',
  ]);
  assert.deepEqual(classifyRequest(undefined, { input: 'jane@example.com' }).detectors, ['email']);
});

test('token-id prompts are not text: unscanned, never read as numbers', () => {
  assert.deepEqual(classify(undefined, { input: [4111111111111111, 5551234567] }), ['unscanned']);
  assert.deepEqual(classify(undefined, { prompt: [[4111111111111111, 1]] }), ['unscanned']);
  assert.deepEqual(classifyRequest(undefined, { input: [[1, 2], 'a', 3] }).unscanned, [
    { reason: 'token-ids', path: 'input[0]' },
  ]);
});

test('scans every string: system, suffix, refusal, user, and tool definitions too', () => {
  for (const body of [
    { system: 'write to u@example.com' },
    { suffix: 'u@example.com' },
    { user: 'u@example.com' },
    { messages: [{ role: 'assistant', refusal: 'u@example.com' }] },
    { tools: [{ type: 'function', function: { name: 'f', description: 'contact help@acme.com' } }] },
  ])
    assert.deepEqual(classify(undefined, body), ['pii'], JSON.stringify(body));
});

test('odd bodies are harmless', () => {
  for (const body of [undefined, null, 'text', 42, [], { messages: 'x' }, { messages: [null, 1, { content: 7 }] }]) {
    assert.deepEqual(classify(undefined, body), []);
  }
});
