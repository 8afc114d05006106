// Seeded property-based fuzzing of the parsers that read what strangers write: the request
// parser (+ token estimate and classifier behind it), the Prometheus text parser, the gossip
// decoder (the API listener's HTTP is node:http's; test/http-differential.test.ts holds it to
// node:http's own server). Small counts here (FUZZ_RUNS
// raises them); a failure prints its seed and case number.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { classify } from '../agent/classify/classify.ts';
import { decodePayload, encodePayload, WireError } from '../agent/gossip/wire.ts';
import { estimatePromptTokens } from '../agent/predict/tokens.ts';
import { parseInferenceRequest, RequestError } from '../agent/server/bodies/request.ts';
import { toPodLoad } from '../agent/telemetry/adapters.ts';
import { parsePromText } from '../agent/telemetry/promtext.ts';
import { implausibility } from '../agent/telemetry/plausible.ts';
import { mulberry32, type Rand } from '../shared/sim/random.ts';
import { int, pick, requestText } from './fixtures/fuzz-requests.ts';
import { podEstimates } from './fixtures/gossip-estimates.ts';
import { GossipState } from '../agent/gossip/state.ts';
import { writeDelta } from '../agent/gossip/packing.ts';

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
