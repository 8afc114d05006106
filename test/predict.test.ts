import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TtftPredictor, predictWith } from '../agent/predict/predictor.ts';
import { estimatePromptTokens } from '../agent/predict/tokens.ts';
import { mulberry32 } from '../shared/sim/random.ts';

/** A pod whose true TTFT is linear in its state, with multiplicative noise. */
function truePod(slowdown: number) {
  return (q: number, r: number, p: number) => slowdown * (20 + 180 * q + 3 * r + 0.25 * p);
}

const seeded = mulberry32;

function train(predictor: TtftPredictor, pod: ReturnType<typeof truePod>, n: number, rand: () => number) {
  for (let i = 0; i < n; i++) {
    const q = Math.floor(rand() * 6);
    const r = Math.floor(rand() * 16);
    const p = 100 + Math.floor(rand() * 2000);
    predictor.observe({ queued: q, running: r, promptTokens: p }, pod(q, r, p) * (0.95 + 0.1 * rand()));
  }
}

test('learns a pod half as fast as twice the predicted TTFT', () => {
  const rand = seeded(7);
  const fast = new TtftPredictor();
  const slow = new TtftPredictor();
  train(fast, truePod(1), 300, rand);
  train(slow, truePod(2), 300, rand);
  const state = { queued: 3, running: 8, promptTokens: 1000 };
  const ratio = slow.predict(state) / fast.predict(state);
  assert.ok(ratio > 1.8 && ratio < 2.2, `slow/fast ratio ${ratio}`);
  const truth = truePod(2)(3, 8, 1000);
  assert.ok(Math.abs(slow.predict(state) - truth) / truth < 0.1, `slow prediction ${slow.predict(state)} vs ${truth}`);
});

test('predicts sensibly before any observation (the prior)', () => {
  const p = new TtftPredictor();
  assert.ok(
    p.predict({ queued: 0, running: 0, promptTokens: 100 }) < p.predict({ queued: 4, running: 0, promptTokens: 100 }),
  );
  assert.ok(
    p.predict({ queued: 0, running: 0, promptTokens: 100 }) < p.predict({ queued: 0, running: 0, promptTokens: 4000 }),
  );
  assert.ok(Number.isNaN(p.mape));
});

test('tracks a pod that slows down (forgetting)', () => {
  const rand = seeded(3);
  const p = new TtftPredictor();
  train(p, truePod(1), 300, rand);
  train(p, truePod(3), 300, rand);
  const state = { queued: 2, running: 4, promptTokens: 500 };
  const truth = truePod(3)(2, 4, 500);
  assert.ok(Math.abs(p.predict(state) - truth) / truth < 0.1, `${p.predict(state)} vs ${truth}`);
});

/**
 * A pod like the simulator's (8B on one GPU, batch of 16): prefill slows as the batch fills, and a
 * full batch adds the wait for a slot to free, which no linear feature shows (`running` is stuck at 16).
 */
const simLikeTtft = (q: number, r: number, p: number, pending: number) =>
  13 + 0.25 * p * (1 + (0.5 * r) / 16) + 1.6 * r + 250 * q + 0.3 * pending + (r >= 16 ? 1500 : 0);

function observeSaturated(p: TtftPredictor, n: number, rand: () => number) {
  for (let i = 0; i < n; i++) {
    const f = {
      queued: Math.floor(rand() * 4),
      running: 16,
      promptTokens: 50 + Math.floor(rand() * 1500),
      pendingPromptTokens: 2000 + Math.floor(rand() * 8000),
    };
    p.observe(f, simLikeTtft(f.queued, f.running, f.promptTokens, f.pendingPromptTokens) * (0.8 + 0.4 * rand()));
  }
}

test('a saturated pod teaches queueing, not its idle cost (the price of a held request)', () => {
  const idle = { queued: 0, running: 0, promptTokens: 256 };
  const trueIdle = simLikeTtft(0, 0, 256, 0);
  const saturated = { queued: 2, running: 16, promptTokens: 300, pendingPromptTokens: 6000 };
  const trueSaturated = simLikeTtft(2, 16, 300, 6000);
  const check = (p: TtftPredictor, when: string) => {
    const idleRatio = p.predict(idle) / trueIdle;
    assert.ok(idleRatio > 0.75 && idleRatio < 1.35, `${when}: idle cost ${p.predict(idle)} vs ${trueIdle}`);
    const satRatio = p.predict(saturated) / trueSaturated;
    assert.ok(satRatio > 0.9 && satRatio < 1.1, `${when}: saturated ${p.predict(saturated)} vs ${trueSaturated}`);
  };
  // Saturated from its first request (a cold start into a burst): before the fix the intercept
  // took the queueing and wound up without bound (5·10⁷ ms).
  const rand = seeded(5);
  const cold = new TtftPredictor();
  observeSaturated(cold, 400, rand);
  check(cold, 'saturated from the start');
  // Light load first, then saturation: before the fix the idle cost rose 53 %.
  const warm = new TtftPredictor();
  for (let i = 0; i < 300; i++) {
    const busy = rand() < 0.2;
    const f = {
      queued: busy ? 1 : 0,
      running: Math.floor(rand() * 6),
      promptTokens: 50 + Math.floor(rand() * 1500),
      pendingPromptTokens: busy ? Math.floor(rand() * 800) : 0,
    };
    warm.observe(f, simLikeTtft(f.queued, f.running, f.promptTokens, f.pendingPromptTokens) * (0.8 + 0.4 * rand()));
  }
  observeSaturated(warm, 400, rand);
  check(warm, 'light load, then saturated');
});

test('a full batch draining back to fast TTFTs is learned back down (no coefficient held at 0 ratchets the others up)', () => {
  // With the batch full, `running` is nearly a constant: the intercept and perRunning trade off.
  // Each fast TTFT pushed the intercept below 0, clipping it back left perRunning and
  // perKPromptTokens raised for it, and the prediction climbed with every fast measurement
  // (to 10⁹ ms and more before the projection in the fit's metric).
  const state = { queued: 0, running: 14, promptTokens: 400 };
  const truth = (running: number, tokens: number) => 60 + 2 * running + 0.25 * tokens;
  for (const seed of [1, 2, 3]) {
    const rand = seeded(seed);
    const p = new TtftPredictor();
    for (let i = 0; i < 200; i++) {
      p.observe({ queued: 0, running: 16, promptTokens: 200 + rand() * 400 }, 1500 + rand() * 1000);
    }
    const atOverload = p.predict(state);
    let highest = 0;
    for (let i = 0; i < 200; i++) {
      const running = 12 + Math.floor(rand() * 5);
      const tokens = 150 + rand() * 700;
      p.observe({ queued: 0, running, promptTokens: tokens }, truth(running, tokens) * (0.8 + 0.4 * rand()));
      highest = Math.max(highest, p.predict(state));
    }
    assert.ok(highest <= atOverload, `seed ${seed}: rose to ${highest} from ${atOverload} while learning fast TTFTs`);
    const ratio = p.predict(state) / truth(14, 400);
    assert.ok(ratio > 0.8 && ratio < 1.25, `seed ${seed}: ${p.predict(state)} vs ${truth(14, 400)} after the drain`);
    for (const [name, value] of Object.entries(p.params)) assert.ok(value >= 0, `seed ${seed}: ${name} ${value} < 0`);
  }
});

test('ignores non-finite observations and never predicts below the floor', () => {
  const p = new TtftPredictor();
  p.observe({ queued: 0, running: 0, promptTokens: 10 }, NaN);
  p.observe({ queued: 0, running: 0, promptTokens: 10 }, -5);
  assert.equal(p.observations, 0);
  assert.equal(
    predictWith(
      { base: -100, perQueued: 0, perRunning: 0, perKPromptTokens: 0 },
      { queued: 0, running: 0, promptTokens: 0 },
    ),
    1,
  );
});

test('estimates prompt tokens from chat, completions and embeddings bodies', () => {
  const text = 'x'.repeat(400);
  assert.equal(estimatePromptTokens({ messages: [{ role: 'user', content: text }] }), 104);
  assert.equal(estimatePromptTokens({ messages: [{ role: 'user', content: [{ type: 'text', text }] }] }), 104);
  assert.equal(estimatePromptTokens({ prompt: text }), 100);
  assert.equal(estimatePromptTokens({ input: [text, text] }), 200);
  assert.equal(estimatePromptTokens({}), 1);
});

test('the node model learns a pod half as fast as half as fast, sharing the shape across pods', async () => {
  const { NodeModel } = await import('../agent/predict/node-model.ts');
  const rand = seeded(11);
  const model = new NodeModel();
  const pods = { fast: truePod(1), slow: truePod(2) };
  for (let i = 0; i < 400; i++) {
    const [uid, pod] = i % 4 === 3 ? ['slow', pods.slow] : ['fast', pods.fast];
    const q = Math.floor(rand() * 4);
    const r = Math.floor(rand() * 16);
    const p = 100 + Math.floor(rand() * 1500);
    model.observe(uid, { queued: q, running: r, promptTokens: p }, pod(q, r, p) * (0.95 + 0.1 * rand()));
  }
  const state = { queued: 1, running: 8, promptTokens: 600 };
  const ratio = model.predict('slow', state) / model.predict('fast', state);
  assert.ok(ratio > 1.8 && ratio < 2.2, `slow/fast ratio ${ratio}`);
  assert.ok(model.stats('fast').mape < 0.15, `fast MAPE ${model.stats('fast').mape}`);
  const truth = pods.slow(1, 8, 600);
  assert.ok(Math.abs(model.predict('slow', state) - truth) / truth < 0.1);
});

test("a pod's parameters, asked between observations, are those of a fresh model fed the same observations", async () => {
  const { NodeModel } = await import('../agent/predict/node-model.ts');
  const asked = new NodeModel();
  const seen: [string, { queued: number; running: number; promptTokens: number }, number][] = [];
  const rand = mulberry32(3);
  for (let i = 0; i < 60; i++) {
    const uid = ['a', 'b', 'c'][i % 3];
    const f = { queued: i % 4, running: (i * 5) % 16, promptTokens: 200 + ((i * 37) % 800) };
    const ms =
      (uid === 'b' ? 2 : 1) * (30 + 150 * f.queued + 2 * f.running + 0.25 * f.promptTokens) * (0.8 + 0.4 * rand());
    for (const pod of ['a', 'b', 'c', 'new']) asked.params(pod); // read (and kept) before each observation
    asked.observe(uid, f, ms);
    seen.push([uid, f, ms]);
    if (i === 30) asked.forget('c');
    const fresh = new NodeModel();
    seen.forEach(([u, features, t], k) => {
      fresh.observe(u, features, t);
      if (k === 30) fresh.forget('c');
    });
    for (const pod of ['a', 'b', 'c', 'new']) assert.deepEqual(asked.params(pod), fresh.params(pod));
  }
  assert.throws(() => {
    (asked.params('a') as { base: number }).base = 0;
  }, TypeError);
});
