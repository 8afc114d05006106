// Session affinity: a session stays on the pod that served it while that pod is a candidate within
// the SLO, moves when it is not, and the memory of sessions is bounded. Pure decisions, the bounded
// store, and the agent on loopback with simulated pods.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { decide } from '../agent/route/router.ts';
import { stickToSession } from '../agent/route/session.ts';
import { SessionAffinity } from '../agent/server/request-path/sessions.ts';
import { routeCandidate, routePolicy, routeRequest, STAY } from './helpers/route-fixtures.ts';
import { chatBody, postJson, startStack, waitFor, type Stack } from './helpers/stack.ts';

const params = (base: number) => ({ base, perQueued: 0, perRunning: 0, perKPromptTokens: 0 });

describe('sticking to a session (pure)', () => {
  const candidates = () => [
    routeCandidate('fast', { params: params(100) }),
    routeCandidate('slower', { params: params(300) }),
    routeCandidate('too-slow', { params: params(900) }),
  ];
  const decision = () =>
    decide({
      request: routeRequest(),
      policy: routePolicy({ sloTtftMs: 500 }),
      candidates: candidates(),
      leave: STAY,
      rand: () => 0,
    });

  it("keeps the session's pod while it is predicted within the SLO, though another is faster", () => {
    const d = stickToSession(decision(), 'ns/slower');
    assert.equal(d.action, 'pod');
    assert.equal(d.action === 'pod' && d.chosen.candidate.pod.name, 'slower');
    assert.equal(d.action === 'pod' && d.predictedTtftMs, 300);
  });

  it("moves when the session's pod is predicted over the SLO, or unknown", () => {
    for (const uid of ['ns/too-slow', 'ns/gone', undefined]) {
      const d = stickToSession(decision(), uid);
      assert.equal(d.action === 'pod' && d.chosen.candidate.pod.name, 'fast', String(uid));
    }
  });
});

describe('the session store', () => {
  const headers = (h: Record<string, string>) => ({ get: (name: string) => h[name] });

  it("takes the key from the header, else the body's user or metadata.user_id, scoped to the tenant", () => {
    const s = new SessionAffinity({ header: 'x-session-id', fromBody: true, maxSessions: 10, ttlMs: 1000 }, () => 0);
    assert.equal(s.keyOf('t', headers({ 'x-session-id': 'abc' }), { user: 'u' }), 't\u0000abc');
    assert.equal(s.keyOf('t', headers({}), { user: 'u' }), 't\u0000user:u');
    assert.equal(s.keyOf('t', headers({}), { metadata: { user_id: 'u' } }), 't\u0000user:u');
    assert.equal(s.keyOf('t', headers({}), {}), undefined);
    assert.equal(s.keyOf('t', headers({ 'x-session-id': 'x'.repeat(300) }), {}), undefined, 'too long: no session');
    const noBody = new SessionAffinity(
      { header: 'x-session-id', fromBody: false, maxSessions: 10, ttlMs: 1000 },
      () => 0,
    );
    assert.equal(noBody.keyOf('t', headers({}), { user: 'u' }), undefined);
  });

  it('holds at most maxSessions, and forgets a session after its TTL', () => {
    let now = 1_000; // lru-cache reads a start time of 0 as "no TTL"
    const s = new SessionAffinity({ header: 'h', fromBody: true, maxSessions: 2, ttlMs: 1000 }, () => now);
    s.served('a', 'pod-1');
    s.served('b', 'pod-2');
    s.served('c', 'pod-3');
    assert.equal(s.size, 2);
    assert.equal(s.podOf('a'), undefined, 'least recently used forgotten');
    assert.equal(s.podOf('c'), 'pod-3');
    now = 5_000;
    assert.equal(s.podOf('c'), undefined, 'expired');
  });
});

describe('session affinity in the agent', () => {
  let stack: Stack;
  const served = (res: Response) => res.headers.get('x-kinference-route');

  before(async () => {
    stack = await startStack({
      pods: [{}, {}, {}],
      config: { sessions: { header: 'x-session-id' } },
    });
    await waitFor(
      async () => {
        const state = (await (await fetch(`${stack.admin}/debug/state`)).json()) as { pods: { local: unknown[] } };
        return state.pods.local.length === 3;
      },
      5000,
      'three pods known',
    );
  });
  after(() => stack?.close());

  it('keeps every turn of a session on its pod', async () => {
    for (const session of ['s-1', 's-2', 's-3']) {
      const routes = new Set<string | null>();
      for (let turn = 0; turn < 4; turn++) {
        const res = await postJson(`${stack.api}/v1/chat/completions`, chatBody(`turn ${turn}`), {
          'x-session-id': session,
        });
        assert.equal(res.status, 200);
        await res.text();
        routes.add(served(res));
      }
      assert.equal(routes.size, 1, `${session}: ${[...routes].join(', ')}`);
    }
  });

  it("keeps a session by the body's user when no header names it", async () => {
    const routes = new Set<string | null>();
    for (let turn = 0; turn < 4; turn++) {
      const res = await postJson(`${stack.api}/v1/chat/completions`, chatBody(`turn ${turn}`, { user: 'alice' }));
      await res.text();
      routes.add(served(res));
    }
    assert.equal(routes.size, 1, [...routes].join(', '));
  });

  it('moves the session when its pod is gone, and stays on the new pod after', async () => {
    const first = await postJson(`${stack.api}/v1/chat/completions`, chatBody('hello'), { 'x-session-id': 'moving' });
    await first.text();
    const pod = served(first)!;
    const index = Number(pod.slice('local/pod-'.length));
    await stack.sims[index]!.close();
    const moved = new Set<string | null>();
    for (let turn = 0; turn < 3; turn++) {
      const res = await postJson(`${stack.api}/v1/chat/completions`, chatBody(`turn ${turn}`), {
        'x-session-id': 'moving',
      });
      assert.equal(res.status, 200);
      await res.text();
      moved.add(served(res));
    }
    assert.equal(moved.size, 1, [...moved].join(', '));
    assert.notEqual([...moved][0], pod);
  });
});
