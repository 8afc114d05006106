// Seeded property-based fuzzing of the parsers that read what strangers write: the request
// parser (+ token estimate and classifier behind it), the Prometheus text parser, the gossip
// decoder, and the API listener's head parser and body framing. Small counts here (FUZZ_RUNS
// raises them); a failure prints its seed and case number.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { classify } from '../agent/classify/classify.ts';
import { decodePayload, encodePayload, WireError } from '../agent/gossip/wire.ts';
import { estimatePromptTokens } from '../agent/predict/tokens.ts';
import { parseInferenceRequest, RequestError } from '../agent/server/request.ts';
import { toPodLoad } from '../agent/telemetry/adapters.ts';
import { parsePromText } from '../agent/telemetry/promtext.ts';
import { implausibility } from '../agent/telemetry/plausible.ts';
import { mulberry32, type Rand } from '../shared/sim/random.ts';
import { int, pick, requestText } from './fixtures/fuzz-requests.ts';
import { podEstimates } from './fixtures/gossip-estimates.ts';
import { GossipState } from '../agent/gossip/state.ts';
import { writeDelta } from '../agent/gossip/packing.ts';
import { parseRequestHead } from '../agent/server/http1/head.ts';
import { BodyFraming } from '../agent/server/http1/body.ts';

const SEED = Number(process.env.FUZZ_SEED ?? 20261201);
const RUNS = Number(process.env.FUZZ_RUNS ?? 300);

test('request parser, token estimate and classifier: any bytes give a parsed request or a 4xx RequestError, never another throw', () => {
  const rand = mulberry32(SEED);
  for (let i = 0; i < RUNS; i++) {
    const text = requestText(rand);
    const kind = pick(rand, ['chat', 'completions', 'embeddings'] as const);
    try {
      const parsed = parseInferenceRequest(kind, Buffer.from(text));
      const tokens = estimatePromptTokens(parsed.body);
      assert.ok(Number.isInteger(tokens) && tokens >= 1, `case ${i}: tokens ${tokens}`);
      const tags = classify(null, parsed.body);
      assert.ok(Array.isArray(tags));
      JSON.stringify(parsed.body); // what a provider call does with it
    } catch (error) {
      assert.ok(
        error instanceof RequestError,
        `seed ${SEED} case ${i}: ${(error as Error).stack}\n${text.slice(0, 300)}`,
      );
      assert.ok(error.status >= 400 && error.status < 500);
    }
  }
});

function promLine(rand: Rand): string {
  const name = pick(rand, [
    'vllm:num_requests_waiting',
    'vllm:num_requests_running',
    'vllm:kv_cache_usage_perc',
    'vllm:request_success_total',
    'vllm:time_to_first_token_seconds_sum',
    'other_metric',
    '',
    '9bad',
  ]);
  const labels =
    rand() < 0.5
      ? `{model_name="m",engine="${int(rand, 3)}"${rand() < 0.1 ? ',x="\\"' : ''}}`
      : rand() < 0.1
        ? '{unterminated'
        : '';
  const v = pick(rand, ['0', '1', '-1000', 'NaN', '+Inf', '-Inf', '1e308', '3.5', 'x', '', '0x10']);
  const ts = rand() < 0.1 ? ` ${pick(rand, ['1700000000000', 'bad'])}` : '';
  return rand() < 0.1
    ? pick(rand, ['# TYPE vllm:num_requests_waiting gauge', '# HELP x', '#', '# EOF', '\u0000\u0000'])
    : `${name}${labels} ${v}${ts}`;
}

test('Prometheus parser and adapters: any page gives a page (with diagnostics) and a load that is either refused or plausible', () => {
  const rand = mulberry32(SEED + 1);
  for (let i = 0; i < RUNS; i++) {
    const text = Array.from({ length: int(rand, 30) }, () => promLine(rand)).join(pick(rand, ['\n', '\r\n']));
    const page = parsePromText(text);
    assert.ok(page.errors >= 0);
    const result = toPodLoad(page, 0, 'vllm');
    if (!result.ok) continue;
    const why = implausibility(result.load, undefined);
    if (why === undefined) {
      for (const k of ['waiting', 'running'] as const)
        assert.ok(Number.isFinite(result.load[k]) && result.load[k] >= 0, `seed ${SEED + 1} case ${i}: ${k}`);
    }
  }
});

test('gossip decoder: mutated payloads decode to a valid payload or throw a decoding error, never anything else (a found case: invalid UTF-8 in a string threw a TypeError)', () => {
  const rand = mulberry32(SEED + 2);
  const state = new GossipState({ nodeId: 'n1', incarnation: 1000 });
  state.localUpdate(podEstimates('n1', 4, {}, 2000), 2000);
  const good = encodePayload({ deltas: [writeDelta(state.self, 0, 1 << 16, 2000)!.delta] });
  assert.ok(decodePayload(good).deltas.length === 1);
  for (let i = 0; i < RUNS; i++) {
    const bytes = Buffer.from(good);
    const mutation = rand();
    let input: Uint8Array;
    if (mutation < 0.4) {
      for (let j = 1 + int(rand, 8); j > 0; j--) bytes[int(rand, bytes.length)] = int(rand, 256);
      input = bytes;
    } else if (mutation < 0.7) input = bytes.subarray(0, int(rand, bytes.length));
    else input = Buffer.from(Array.from({ length: int(rand, 400) }, () => int(rand, 256)));
    try {
      const payload = decodePayload(input);
      assert.ok(Array.isArray(payload.deltas));
    } catch (error) {
      assert.ok(error instanceof WireError, `seed ${SEED + 2} case ${i}: ${(error as Error).stack}`);
    }
  }
});

/** A request head near the valid one: fields dropped, repeated, mangled, line ends and bytes changed. */
function requestHead(rand: Rand): string {
  const fields = [
    'Host: agent',
    'Content-Length: 12',
    'Transfer-Encoding: chunked',
    'Connection: close',
    'Expect: 100-continue',
    'X-Request-Id: abc',
    'Content-Length: 13',
    'Transfer-Encoding: gzip, chunked',
    ' folded',
  ];
  const lines = [
    pick(rand, ['POST /v1/chat/completions HTTP/1.1', 'GET / HTTP/1.0', 'GET / HTTP/2.0', 'X  / HTTP/1.1']),
  ];
  for (let n = int(rand, 6); n > 0; n--) lines.push(pick(rand, fields));
  let text = lines.join(pick(rand, ['\r\n', '\r\n', '\r\n', '\n', '\r']));
  for (let n = int(rand, 4); n > 0; n--) {
    const at = int(rand, text.length + 1);
    text = text.slice(0, at) + String.fromCharCode(int(rand, 256)) + text.slice(at + (rand() < 0.5 ? 1 : 0));
  }
  return text;
}

test('API head parser and body framing: any head gives a head or a refusal with a 4xx/5xx status, any body bytes a body or a reason, never a throw', () => {
  const rand = mulberry32(SEED);
  const limits = { maxHeaders: 8, maxTargetBytes: 64 };
  for (let i = 0; i < RUNS * 10; i++) {
    const text = requestHead(rand);
    const head = parseRequestHead(text, limits);
    if ('status' in head) {
      assert.ok([400, 414, 417, 431, 501, 505].includes(head.status), `seed ${SEED} case ${i}: ${head.status}`);
      continue;
    }
    // What was accepted is framed one way only.
    assert.ok(head.body === 'chunked' || (Number.isInteger(head.body) && head.body >= 0), `case ${i}`);
    assert.ok(!(head.body === 'chunked' && head.fields['content-length'] !== undefined), `case ${i}: TE and CL`);
    const body = Buffer.from(
      Array.from({ length: int(rand, 40) }, () => pick(rand, ['0', '5', 'a', '\r\n', ';x', 'hello', '\n', 'z'])).join(
        '',
      ),
    );
    const framing = new BodyFraming(head.body, 32);
    const next = framing.read(body, 0, body.length);
    assert.ok(typeof next === 'string' || (next >= 0 && next <= body.length), `case ${i}: ${next}`);
  }
});
