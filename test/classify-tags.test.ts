import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_HEADER_TAGS, parseTagHeader } from '../agent/classify/tags.ts';
import { classify, classifyRequest } from '../agent/classify/classify.ts';

const CLEAN = { messages: [{ role: 'user', content: 'What is the capital of France?' }] };
const WITH_EMAIL = { messages: [{ role: 'user', content: 'Write to jane@example.com' }] };

test('header tags are split on commas, trimmed, lowercased, de-duplicated and sorted', () => {
  assert.deepEqual(classify(' Internal , pii,internal,,  team.a_b-1 ', CLEAN), ['internal', 'pii', 'team.a_b-1']);
});

test('no header and no PII: no tags', () => {
  assert.deepEqual(classify(undefined, CLEAN), []);
  assert.deepEqual(classify('', CLEAN), []);
  assert.deepEqual(classify(' , ,', CLEAN), []);
});

test('entries outside [a-z0-9._-] are dropped and reported', () => {
  const r = parseTagHeader('ok,has space,ünïcode,semi;colon,-leading,.dot,x');
  assert.deepEqual(r.tags, ['ok', 'x']);
  assert.deepEqual(r.rejected, ['has space', 'ünïcode', 'semi;colon', '-leading', '.dot']);
});

test('too long tags and too many tags are dropped', () => {
  const long = 'a'.repeat(65);
  const many = Array.from({ length: MAX_HEADER_TAGS + 4 }, (_, i) => `t${i}`).join(',');
  assert.deepEqual(parseTagHeader(long).tags, []);
  assert.equal(parseTagHeader(long).rejected.length, 1);
  const r = parseTagHeader(many);
  assert.equal(r.tags.length, MAX_HEADER_TAGS);
  assert.deepEqual(r.rejected, ['t16', 't17', 't18', 't19']);
  assert.equal(parseTagHeader('a'.repeat(64)).tags.length, 1);
});

test('a repeated tag does not count twice against the limit', () => {
  const r = parseTagHeader([...Array.from({ length: MAX_HEADER_TAGS }, (_, i) => `t${i}`), 't0', 't1'].join(','));
  assert.equal(r.tags.length, MAX_HEADER_TAGS);
  assert.deepEqual(r.rejected, []);
});

test('detectors add pii to header tags', () => {
  assert.deepEqual(classify('internal', WITH_EMAIL), ['internal', 'pii']);
  assert.deepEqual(classifyRequest('internal', WITH_EMAIL).detectors, ['email']);
});

test("a header can never remove a detector's tag", () => {
  for (const header of [
    '-pii',
    '!pii',
    'no-pii',
    'pii=false',
    'nopii',
    '',
    undefined,
    null,
    'public',
    ','.repeat(100),
    Array.from({ length: 40 }, (_, i) => `t${i}`).join(','),
  ]) {
    assert.ok(classify(header, WITH_EMAIL).includes('pii'), `header ${JSON.stringify(header)} removed pii`);
  }
});

test('a header may declare pii with no detector firing', () => {
  assert.deepEqual(classify('PII', CLEAN), ['pii']);
  assert.deepEqual(classifyRequest('PII', CLEAN).detectors, []);
});

test('rejected header entries are reported by classifyRequest', () => {
  assert.deepEqual(classifyRequest('ok, bad tag', CLEAN), {
    tags: ['ok'],
    detectors: [],
    custom: [],
    findings: [],
    unscanned: [],
    rejectedHeaderTags: ['bad tag'],
  });
});
