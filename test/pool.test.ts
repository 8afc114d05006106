// The pool's request bookkeeping, with a frozen clock: what a request leaves behind at a pod
// until its first token, and how that reaches the router.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PodPool, type PoolOptions } from '../agent/pool/pool.ts';
import { promptBlocks } from '../agent/prefix/blocks.ts';
import { predictedTtft } from '../agent/route/score.ts';
import { decide } from '../agent/route/router.ts';
import { PodTelemetry } from '../agent/telemetry/pod-telemetry.ts';
import type { Pod, PodEstimate, PodLoad } from '../agent/types.ts';
import { poolOptions, routePod, routePolicy } from './helpers/route-fixtures.ts';

const POLICY = routePolicy({ name: 't', sloTtftMs: 10_000 });
const pod = (name: string): Pod => routePod(name, { node: 'n', engine: 'vllm' });

/** A pool with this file's standard options (any can be overridden), no pods yet. */
const newPool = (now: () => number, options: Partial<PoolOptions> = {}): PodPool =>
  new PodPool(poolOptions(now, options));

const scrape = (p: PodPool, name: string, load: Omit<PodLoad, 'engine'>, telemetry = new PodTelemetry()) => {
  const full: PodLoad = { engine: 'vllm', ...load };
  telemetry.record(full);
  p.recordLoad(`ns/${name}`, full, telemetry);
  return telemetry;
};

/** A peer's estimate of its pod `p<q>` (q requests waiting) on `node`, reported at `at`. */
const peerEstimate = (q: number, node: string, at: number, model = 'm'): PodEstimate => ({
  pod: { uid: `p/${q}`, name: `p${q}`, namespace: 'ns', node, address: `10.0.0.${q}:8000`, models: [model] },
  queued: q,
  queuedNow: q,
  running: 0,
  kvCache: 0,
  params: { base: 50, perQueued: 100, perRunning: 5, perKPromptTokens: 10 },
  at,
  origin: node,
  version: 1,
});

function pool(now: { t: number }) {
  const p = newPool(() => now.t);
  p.setLocalPods([pod('a'), pod('b')]);
  for (const name of ['a', 'b']) scrape(p, name, { at: now.t, waiting: 0, running: 2, kvCache: 0.1 });
  return p;
}

test('a prompt counts as pending at its pod from sending until its first token', () => {
  const now = { t: 1000 };
  const p = pool(now);
  const a = p.candidates().find((c) => c.pod.name === 'a')!;
  const ticket = p.begin(a, 4000);
  let after = p.candidates().find((c) => c.pod.name === 'a')!;
  assert.equal(after.pendingPromptTokens, 4000);
  assert.equal(after.pendingRequests, 1);
  assert.equal(after.unseenSent, 1);
  assert.equal(after.inFlight, 1);
  ticket.firstByte(300);
  after = p.candidates().find((c) => c.pod.name === 'a')!;
  assert.equal(after.pendingPromptTokens, 0);
  assert.equal(after.pendingRequests, 0);
  assert.equal(after.inFlight, 1);
  ticket.end(true);
  ticket.end(true); // idempotent
  assert.equal(p.candidates().find((c) => c.pod.name === 'a')!.inFlight, 0);
});

test("a pod's candidate carries this agent's recent send rate to it, fading over the reference window", () => {
  const now = { t: 1000 };
  const p = pool(now);
  const a = () => p.candidates().find((c) => c.pod.name === 'a')!;
  assert.equal(a().sentPerMs, 0);
  for (let i = 0; i < 30; i++) {
    p.begin(a(), 100).end(true);
    now.t += 1000;
  }
  // One a second for 30 s, the last 1 s ago: each send counts exp(−age / 30 s), over 30 s. About
  // 0.62 per s, still building up toward 1 (and nothing sent to b).
  let expected = 0;
  for (let age = 1; age <= 30; age++) expected += Math.exp(-age / 30) / 30;
  assert.ok(Math.abs(a().sentPerMs! * 1000 - expected) < 1e-9, `${a().sentPerMs! * 1000} vs ${expected}`);
  assert.equal(p.candidates().find((c) => c.pod.name === 'b')!.sentPerMs, 0);
  now.t += 30_000;
  const faded = a().sentPerMs!;
  assert.ok(faded < 0.4 * 0.001 && faded > 0, `${faded}`);
});

test('a request that ends without a first token releases its pending prompt too', () => {
  const now = { t: 1000 };
  const p = pool(now);
  const ticket = p.begin(p.candidates()[0], 1200);
  ticket.end(false);
  assert.equal(p.candidates()[0].pendingPromptTokens, 0);
  assert.equal(p.candidates()[0].pendingRequests, 0);
});

test('the router sends a new request away from a pod with a long prompt still prefilling', () => {
  const now = { t: 1000 };
  const p = pool(now);
  p.begin(
    p.candidates().find((c) => c.pod.name === 'a')!,
    6000,
  );
  // A new scrape clears "unseen" but not "pending": the queue now shows the request, its prompt still stands in front.
  for (const name of ['a', 'b']) {
    const telemetry = new PodTelemetry();
    const load: PodLoad = { at: now.t + 100, engine: 'vllm', waiting: 0, running: name === 'a' ? 3 : 2, kvCache: 0.1 };
    telemetry.record(load);
    p.recordLoad(`ns/${name}`, load, telemetry);
  }
  now.t += 100;
  const d = decide({
    request: { kind: 'chat', model: 'm', tenant: 't', namespace: 'ns', tags: [], promptTokens: 200, stream: true },
    policy: POLICY,
    candidates: p.candidates(),
    leave: { allowed: false, reason: '', providers: [] },
    rand: () => 0,
  });
  assert.equal(d.action === 'pod' && d.chosen.candidate.pod.name, 'b');
  const [best, behind] = d.scored;
  assert.ok(behind.predictedMs - best.predictedMs > 1000, `${behind.predictedMs} vs ${best.predictedMs}`);
});

test("a request answered before the next scrape is no unseen queue; one still running at the scrape is the scrape's to show", () => {
  const now = { t: 1000 };
  const p = pool(now);
  const a = () => p.candidates().find((c) => c.pod.name === 'a')!;
  const answered = p.begin(a(), 10, 'chat', false);
  const running = p.begin(a(), 10, 'chat', false);
  assert.equal(a().unseenSent, 2);
  assert.equal(a().pendingPromptTokens, 0, 'a non-streamed prompt is not counted as pending prefill');
  assert.equal(a().pendingRequests, 0, 'nor is the request: its first token is never seen');
  answered.answered(5);
  answered.end(true);
  assert.equal(a().unseenSent, 1);
  const telemetry = new PodTelemetry();
  const load: PodLoad = { at: now.t + 100, engine: 'vllm', waiting: 0, running: 3, kvCache: 0.1 };
  telemetry.record(load);
  p.recordLoad('ns/a', load, telemetry);
  assert.equal(a().unseenSent, 0);
  const later = p.begin(a(), 10, 'chat', false);
  running.end(true); // sent before the scrape: the new epoch's count is not its to decrement
  assert.equal(a().unseenSent, 1);
  later.end(true);
  assert.equal(a().unseenSent, 0);
});

test('a non-streamed answer sooner than the predicted TTFT lowers the prediction; a slower one teaches nothing', () => {
  const now = { t: 1000 };
  const p = pool(now);
  const a = () => p.candidates().find((c) => c.pod.name === 'a')!;
  const before = a().params.base;
  const slow = p.begin(a(), 100, 'chat', false);
  slow.answered(60_000);
  slow.end(true);
  assert.equal(a().params.base, before, 'a long answer holds decode time: no TTFT bound');
  for (let i = 0; i < 20; i++) {
    const fast = p.begin(a(), 100, 'chat', false);
    fast.answered(2);
    fast.end(true);
  }
  assert.ok(a().params.base < before / 2, `${a().params.base} vs ${before}`);
  // The shape is shared by the node's pods; the speed is each pod's own once measured, and a pod
  // not measured yet is taken as fast as the measured ones (replicas are alike).
  assert.equal(
    p.candidates().find((c) => c.pod.name === 'b')!.params.base,
    a().params.base,
    'the unmeasured neighbour is taken as fast as the measured pod',
  );
});

test('embeddings teach their own model and calibration, not the generation model', () => {
  const now = { t: 1000 };
  const p = pool(now);
  const a = () => p.candidates().find((c) => c.pod.name === 'a')!;
  const generation = a().params;
  for (let i = 0; i < 30; i++) {
    const t = p.begin(a(), 500, 'embeddings', false);
    t.answered(400);
    t.end(true);
  }
  assert.deepEqual(a().params, generation);
  assert.ok(a().embeddingParams!.base !== generation.base);
  const state = p.debugState().local.find((l) => l.pod.name === 'a')!;
  assert.equal(state.embeddingsPredictor.observations, 30);
  assert.equal(state.calibration.free.observations, 30);
});

test("a local pod is stale after two scrape intervals without a good scrape (the scraper's rule)", () => {
  const now = { t: 1000 };
  const p = pool(now);
  const a = () => p.candidates().find((c) => c.pod.name === 'a')!;
  assert.equal(a().maxAgeMs, 200);
  now.t += 150;
  assert.equal(a().ageMs, 150);
  scrape(p, 'a', { at: now.t, waiting: 1, running: 2, kvCache: 0.2 });
  assert.equal(a().ageMs, 0);
  assert.equal(a().queuedNow, 1);
});

test('an implausible page makes the pod unhealthy with its reason until a plausible one; a failed request ejects it until a probe', () => {
  const now = { t: 1000 };
  const p = pool(now);
  const a = () => p.candidates().find((c) => c.pod.name === 'a')!;
  p.recordScrapeFailure('ns/a');
  assert.equal(a().healthy, true, 'a failed scrape only ages the pod');
  p.recordScrapeFailure('ns/a', 'implausible page: waiting = -1000');
  assert.equal(a().healthy, false);
  assert.equal(a().unhealthyReason, 'implausible page: waiting = -1000');
  scrape(p, 'a', { at: now.t, waiting: 0, running: 1, kvCache: 0.1 });
  assert.equal(a().healthy, true);
  p.markFailed(a());
  assert.equal(a().healthy, false);
  assert.equal(
    p.debugState().local.find((l) => l.pod.name === 'a')!.unhealthyReason,
    'failed a request before its first byte',
  );
  assert.deepEqual(p.ejectedDue(), [], 'not probed before its backoff ends');
  now.t += 1000;
  assert.equal(a().healthy, false, 'still out after the backoff: a probe must readmit it');
  assert.deepEqual(
    p.ejectedDue().map((d) => d.uid),
    ['ns/a'],
  );
  p.probed('ns/a', false);
  now.t += 1000;
  assert.deepEqual(p.ejectedDue(), [], 'a failed probe ejects it again, for twice as long');
  now.t += 1000;
  p.probed('ns/a', true);
  assert.equal(a().healthy, true, 'back once a probe succeeds');
});

test("measured TTFTs teach the pod's model and its calibration; a pod that leaves is forgotten", () => {
  const now = { t: 1000 };
  const p = pool(now);
  const a = () => p.candidates().find((c) => c.pod.name === 'a')!;
  const before = a().params.base;
  for (let i = 0; i < 30; i++) {
    const t = p.begin(a(), 100);
    t.firstByte(before * 4);
    t.end(true);
  }
  assert.ok(a().params.base > before, `${a().params.base} vs ${before}`);
  assert.equal(p.debugState().local.find((l) => l.pod.name === 'a')!.calibration.free.observations, 30);
  p.setLocalPods([pod('b')]);
  p.setLocalPods([pod('a'), pod('b')]);
  scrape(p, 'a', { at: now.t, waiting: 0, running: 2, kvCache: 0.1 });
  assert.equal(p.debugState().local.find((l) => l.pod.name === 'a')!.calibration.free.observations, 0);
  // The node's shared shape stays learned; the pod's own speed starts again, like a pod never measured.
  assert.deepEqual(a().params, p.candidates().find((c) => c.pod.name === 'b')!.params);
});

test("without own measurements, the pod's TTFT histogram teaches (from the state at the previous scrape)", () => {
  const now = { t: 1000 };
  const p = newPool(() => now.t);
  p.setLocalPods([pod('a')]);
  const telemetry = scrape(p, 'a', { at: 1000, waiting: 4, running: 8, kvCache: 0.5, ttftSum: 0, ttftCount: 0 });
  const before = p.candidates()[0].params;
  scrape(p, 'a', { at: 1100, waiting: 4, running: 8, kvCache: 0.5, ttftSum: 40, ttftCount: 10 }, telemetry);
  assert.equal(p.debugState().local[0].predictor.observations, 1);
  assert.notDeepEqual(p.candidates()[0].params, before);
});

test('gossiped pods: our own origin is ignored, a new version clears what we sent unseen, gone pods lose their traffic', () => {
  const now = { t: 1000 };
  const p = pool(now);
  const estimate = (origin: string, version: number) => ({
    pod: { uid: `${origin}/x`, name: 'x', namespace: 'ns', node: origin, address: '10.0.0.9:8000', models: ['m2'] },
    queued: 0,
    queuedNow: 0,
    running: 0,
    kvCache: 0,
    params: { base: 50, perQueued: 100, perRunning: 5, perKPromptTokens: 10 },
    at: now.t,
    origin,
    version,
  });
  p.setRemote([estimate('n', 1), estimate('other', 1)]);
  const peers = () => p.candidates().filter((c) => c.where === 'peer');
  assert.deepEqual(
    peers().map((c) => c.pod.uid),
    ['other/x'],
  );
  assert.ok(p.servedModels().has('m2'));
  const ticket = p.begin(peers()[0], 10);
  assert.equal(peers()[0].unseenSent, 1);
  assert.ok(Number.isNaN(ticket.predictedMs), "no local prediction for a peer's pod");
  p.setRemote([estimate('other', 2)]);
  assert.equal(peers()[0].unseenSent, 0);
  assert.equal(peers()[0].inFlight, 1);
  p.setRemote([]);
  assert.equal(peers().length, 0);
  assert.equal(p.servedModels().has('m2'), false);
});

test('candidates for a model: its local pods exactly, and a shortlist of the fastest peers kept from gossip', () => {
  const now = { t: 1000 };
  const p = newPool(() => now.t, { peerShortlist: 3 });
  p.setLocalPods([pod('a'), { ...pod('c'), models: ['other'] }]);
  // Ten peers' pods of model m, the i-th with i waiting: the shortlist holds the three least loaded.
  const peer = (i: number, model = 'm') => peerEstimate(i, `node-${i}`, now.t, model);
  p.setRemote([9, 4, 0, 7, 2, 5, 1, 8, 3, 6].map((i) => peer(i)).concat(peer(20, 'other')));
  const names = (model: string) => p.candidates(model).map((c) => c.pod.name);
  assert.deepEqual(names('m'), ['a', 'p0', 'p1', 'p2']);
  assert.deepEqual(names('other'), ['c', 'p20']);
  assert.deepEqual(names('none'), []);
  assert.equal(p.candidates().length, 13, 'without a model: every known pod');
  // Gossip changes the ranking: the shortlist follows at the next update, not per request.
  p.setRemote([0, 1, 2, 3].map((i) => ({ ...peer(i), queuedNow: 10 - i, queued: 10 - i })));
  assert.deepEqual(names('m'), ['a', 'p3', 'p2', 'p1']);
});

test("debugState lists every local pod and only the fastest peers' pods past its bound, with the count known", () => {
  const now = { t: 1000 };
  const p = pool(now);
  p.setRemote([5, 1, 3].map((q) => peerEstimate(q, 'other', now.t)));

  const state = p.debugState(2);
  assert.equal(state.local.length, 2);
  assert.equal(state.remoteKnown, 3);
  assert.deepEqual(
    state.remote.map((r) => r.pod.name),
    ['p1', 'p3'],
  );
  assert.equal(p.debugState().remote.length, 3);
});

test('nextChange resolves on a change, on its timeout, and at once when aborted', async () => {
  const now = { t: 1000 };
  const p = pool(now);
  const change = p.nextChange(60_000, new AbortController().signal);
  p.markFailed(p.candidates()[0]);
  assert.equal(await change, 'change');
  assert.equal(await p.nextChange(1, new AbortController().signal), 'timeout');
  const controller = new AbortController();
  const aborted = p.nextChange(60_000, controller.signal);
  controller.abort();
  assert.equal(await aborted, 'aborted');
  assert.equal(await p.nextChange(60_000, controller.signal), 'aborted');
});

test('local estimates gossip the reference-window average of the queue and our own model', () => {
  const now = { t: 1000 };
  const p = pool(now);
  const telemetry = scrape(p, 'a', { at: 2000, waiting: 4, running: 2, kvCache: 0.3 });
  now.t = 5000;
  scrape(p, 'a', { at: 5000, waiting: 0, running: 2, kvCache: 0.3 }, telemetry);
  now.t = 8000; // time-weighted: 4 held for 3 s, then 0 for 3 s
  const a = p.localEstimates().find((e) => e.pod.name === 'a')!;
  assert.equal(a.queuedNow, 0);
  assert.ok(a.queued > 0 && a.queued < 4, String(a.queued));
  assert.equal(a.origin, 'n');
  assert.deepEqual(a.params, p.candidates().find((c) => c.pod.name === 'a')!.params);
});

test('the prefix index: a prompt sent to a pod is expected cached there (only there), and a request pays for its uncached tokens', () => {
  const now = { t: 1000 };
  const p = pool(now);
  const blocks = promptBlocks('x'.repeat(64 * 100)); // 100 blocks = 1,600 tokens
  const a = p.candidates(undefined, blocks).find((c) => c.pod.name === 'a')!;
  assert.equal(a.expectedCachedTokens, 0);
  p.begin(a, 1700, 'chat', true, blocks).end(true);
  const [ca, cb] = ['a', 'b'].map((n) => p.candidates(undefined, blocks).find((c) => c.pod.name === n)!);
  assert.equal(ca.expectedCachedTokens, 1600);
  assert.equal(cb.expectedCachedTokens, 0);
  const request = {
    kind: 'chat',
    model: 'm',
    tenant: '',
    namespace: '',
    tags: [],
    promptTokens: 1700,
    stream: true,
  } as const;
  // Same load, same model: the holder's prediction is lower by the prefill of 1,600 tokens.
  const saved = predictedTtft(cb, request) - predictedTtft(ca, request);
  assert.ok(Math.abs(saved - (ca.params.perKPromptTokens * 1600) / 1000) < 1e-9, String(saved));
  // What the pod must still compute (100 tokens) is what stands pending in front of later requests.
  p.begin(ca, 1700, 'chat', true, blocks);
  assert.equal(p.candidates().find((c) => c.pod.name === 'a')!.pendingPromptTokens, 100);
  // A pod that leaves takes its entries with it.
  p.setLocalPods([pod('b')]);
  p.setLocalPods([pod('a'), pod('b')]);
  assert.equal(p.candidates(undefined, blocks).find((c) => c.pod.name === 'a')!.expectedCachedTokens, 0);
});

test('the prefix index ages by what the pod computed (prefix-cache counters) beyond its KV capacity', () => {
  const now = { t: 1000 };
  const p = newPool(() => now.t);
  p.setLocalPods([pod('a')]);
  const cache = { kvCapacityTokens: 16 * 1000, kvCache: 0.5 }; // 1,000 blocks, half held by running requests
  const t = scrape(p, 'a', { at: 1000, waiting: 0, running: 0, ...cache, prefixCacheQueries: 1e6, prefixCacheHits: 0 });
  const blocks = promptBlocks('y'.repeat(64 * 10));
  p.begin(p.candidates(undefined, blocks)[0], 200, 'chat', true, blocks).end(true);
  // 400 blocks computed since (queries − hits): the pod had no need to evict it.
  scrape(
    p,
    'a',
    { at: 1100, waiting: 0, running: 0, ...cache, prefixCacheQueries: 1e6 + 16 * 900, prefixCacheHits: 16 * 500 },
    t,
  );
  assert.equal(p.candidates(undefined, blocks)[0].expectedCachedTokens, 160);
  scrape(
    p,
    'a',
    // 1,001 computed since: more than the pod holds, so its least recently used blocks are gone.
    { at: 1200, waiting: 0, running: 0, ...cache, prefixCacheQueries: 1e6 + 16 * 1501, prefixCacheHits: 16 * 500 },
    t,
  );
  assert.equal(p.candidates(undefined, blocks)[0].expectedCachedTokens, 0);
});

test("a prompt's blocks age from its request's end, when the engine frees them into its LRU", () => {
  // A long request: while it runs the pod computes 900 blocks for others, and 200 more after it
  // ended. 1,100 since it was sent, more than the pod's 1,000: but its blocks were held until its
  // end, and only 200 came after that, so they are still there.
  const p = newPool(() => 1000);
  p.setLocalPods([pod('a')]);
  const cache = { waiting: 0, running: 1, kvCapacityTokens: 16 * 1000, kvCache: 0.5, prefixCacheHits: 0 };
  const t = scrape(p, 'a', { at: 1000, ...cache, prefixCacheQueries: 0 });
  const blocks = promptBlocks('z'.repeat(64 * 10));
  const ticket = p.begin(p.candidates(undefined, blocks)[0], 160, 'chat', true, blocks);
  scrape(p, 'a', { at: 1100, ...cache, prefixCacheQueries: 16 * 900 }, t);
  ticket.firstByte(50);
  ticket.end(true);
  scrape(p, 'a', { at: 1200, ...cache, prefixCacheQueries: 16 * 1100 }, t);
  assert.equal(p.candidates(undefined, blocks)[0].expectedCachedTokens, 160);
  // A request that failed refreshes nothing: the pod may never have computed it.
  const other = promptBlocks('w'.repeat(64 * 10));
  const failed = p.begin(p.candidates(undefined, other)[0], 160, 'chat', true, other);
  scrape(p, 'a', { at: 1300, ...cache, prefixCacheQueries: 16 * 1600 }, t);
  failed.end(false);
  scrape(p, 'a', { at: 1400, ...cache, prefixCacheQueries: 16 * 2101 }, t);
  assert.equal(p.candidates(undefined, other)[0].expectedCachedTokens, 0);
});

test('the scrape path learns from the tokens the pod computed, not those its cache served', () => {
  // Ten 2,000-token prompts with a 100 ms TTFT each; with prefix-cache counters, 1,900 of each came
  // from the cache. Learned against 100 computed tokens the TTFT is slow for them (the model goes
  // up); against the whole prompts it is fast (the model goes down, and long prompts look cheap).
  const learnedAfter = (counters: Partial<PodLoad>[]) => {
    const p = newPool(() => 1000);
    p.setLocalPods([pod('a')]);
    const before = p.candidates()[0].params.perKPromptTokens;
    const base = { waiting: 0, running: 0, kvCache: 0.1 };
    const t = scrape(p, 'a', { at: 1000, ...base, ttftSum: 0, ttftCount: 0, promptTokens: 0, ...counters[0] });
    scrape(p, 'a', { at: 1100, ...base, ttftSum: 1, ttftCount: 10, promptTokens: 20_000, ...counters[1] }, t);
    return p.candidates()[0].params.perKPromptTokens - before;
  };
  assert.ok(
    learnedAfter([
      { prefixCacheQueries: 0, prefixCacheHits: 0 },
      { prefixCacheQueries: 20_000, prefixCacheHits: 19_000 },
    ]) > 0,
  );
  assert.ok(learnedAfter([{}, {}]) < 0);
});

test('a local pod is stale two intervals after a failed scrape, and not before one fails (a late answer is a busy agent)', () => {
  const now = { t: 1000 };
  const p = newPool(() => now.t, { scrapeTimeoutMs: 1000 });
  p.setLocalPods([pod('a')]);
  const telemetry = new PodTelemetry();
  const load: PodLoad = { at: now.t, engine: 'vllm', waiting: 0, running: 0, kvCache: 0 };
  telemetry.record(load);
  p.recordLoad('ns/a', load, telemetry);
  const stale = () =>
    decide({
      request: { kind: 'chat', model: 'm', tenant: 't', namespace: 'ns', tags: [], promptTokens: 200, stream: true },
      policy: POLICY,
      candidates: p.candidates('m'),
      leave: { allowed: false, reason: '', providers: [] },
      rand: () => 0,
    }).dropped.find((d) => d.reason === 'stale');

  now.t += 900; // the loop was busy: no scrape answer read, none failed either
  assert.equal(stale(), undefined);
  p.recordScrapeFailure('ns/a');
  assert.match(stale()?.detail ?? '', /last report 900ms ago \(limit 200ms\)/);
  p.recordLoad('ns/a', { ...load, at: now.t }, telemetry);
  assert.equal(stale(), undefined);
  now.t += 1201; // past the timeout's grace: a scrape that late has timed out, and should have failed
  assert.match(stale()?.detail ?? '', /limit 1200ms/);
});

test('predictions for /metrics: every local pod, and the fastest pod of the fastest peer nodes only', () => {
  const now = { t: 1000 };
  const p = pool(now);
  // Node n<k> has pods with queues k and k + 10: its fastest pod is the first.
  p.setRemote([3, 1, 2].flatMap((k) => [k, k + 10].map((q) => peerEstimate(q, `n${k}`, now.t))));

  const predictions = p.predictions(2);
  assert.deepEqual(
    predictions.local.map((l) => l.pod.name),
    ['a', 'b'],
  );
  assert.deepEqual(
    predictions.remote.map((r) => [r.pod.node, r.pod.name]),
    [
      ['n1', 'p1'],
      ['n2', 'p2'],
    ],
  );
  const state = p.debugState(3);
  assert.equal(predictions.remote[0].predictedTtftMs, state.remote[0].predictedTtftMs);
  assert.deepEqual(
    state.remote.map((r) => r.pod.name),
    ['p1', 'p2', 'p3'],
  );
});

test('an unreachable peer pod is ejected, its node suspected, and it stays ejected while that node is briefly out of view; a pod that answered an error only sits out a moment', () => {
  const now = { t: 1000 };
  const p = newPool(() => now.t);
  const suspected: string[] = [];
  p.onPeerPodFailed((node) => suspected.push(node));
  const estimates = [peerEstimate(1, 'other', now.t), peerEstimate(2, 'other', now.t)];
  p.setRemote(estimates);
  const peer = (q: number) => p.candidates('m').find((c) => c.pod.uid === `p/${q}`)!;
  p.markFailed(peer(1));
  assert.deepEqual(suspected, ['other']);
  p.setRemote([]); // the node's pods out of view while its agent is probed
  p.setRemote(estimates); // it answered: back in view
  assert.equal(peer(1).healthy, false, 'still ejected');
  assert.equal(peer(2).healthy, true);
  p.markFailed(peer(2), 'answered');
  assert.deepEqual(suspected, ['other'], 'an answer is no reason to suspect its node');
  assert.equal(peer(2).healthy, false);
  now.t += 1000;
  assert.equal(peer(2).healthy, true, 'back after the cool-down, no probe needed');
  assert.equal(peer(1).healthy, false, 'the ejected one waits for its probe');
  p.probed('p/1', true);
  assert.equal(peer(1).healthy, true);
});
