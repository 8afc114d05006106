// What a pod's broken HTTP does to the agent, end to end on loopback with raw-socket pods: a
// malformed answer header is a failed attempt before the first byte (retried, its slot released,
// never a 500); bytes a pod writes after its answer never become the next client's answer; and
// passthrough routes keep to a pod's in-flight cap.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { startRawPod, type RawAnswer, type RawPod } from './fixtures/raw-pod.ts';
import { chatBody, MODEL, postJson, startStack, waitFor, type Stack } from './helpers/stack.ts';

const COMPLETION = (n: number) =>
  JSON.stringify({
    id: `c-${n}`,
    object: 'chat.completion',
    choices: [{ index: 0, message: { role: 'assistant', content: `answer ${n}` }, finish_reason: 'stop' }],
  });

/** Request `index`'s whole JSON answer, as a pod writes it. */
const wholeAnswer = (index: number) => {
  const body = COMPLETION(index);
  return `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
};

/** A whole JSON answer, and `after` written right behind it. */
const whole =
  (after = ''): RawAnswer =>
  (socket, index, done) => {
    socket.write(wholeAnswer(index) + after);
    done();
  };

/** A stream whose content type carries `bad` (a bare LF, a NUL). */
const malformed =
  (bad: string): RawAnswer =>
  (socket, _index, done) => {
    socket.write(
      `HTTP/1.1 200 OK\r\ncontent-type: text/event-stream${bad}x\r\ntransfer-encoding: chunked\r\n\r\n` +
        '1b\r\ndata: {"choices":[]}\n\n\r\n',
    );
    done();
  };

function podEntry(name: string, pod: RawPod, extra: Record<string, unknown> = {}) {
  return { name, namespace: 'inference', address: pod.address, engine: 'vllm', models: [MODEL], ...extra };
}

async function stackOf(pods: Record<string, unknown>[], config: Record<string, unknown> = {}): Promise<Stack> {
  return startStack({ pods: [], config: { pods, ...config } });
}

const inFlight = (stack: Stack, name: string) =>
  stack.agent.pool.candidates(MODEL).find((c) => c.pod.name === name)?.inFlight;

for (const [what, bad] of [
  ['a bare LF', '\n'],
  ['a NUL', '\0'],
] as const) {
  test(`a content-type with ${what} is a failed attempt before the first byte: 502 alone, retried with another pod, the slot released`, async () => {
    const broken = await startRawPod(MODEL, malformed(bad));
    const alone = await stackOf([podEntry('broken', broken)]);
    try {
      for (const stream of [false, true]) {
        const response = await postJson(`${alone.api}/v1/chat/completions`, chatBody('hi', { stream }));
        const text = await response.text();
        assert.equal(response.status, 502, text);
        assert.match(text, /"error"/);
      }
      assert.ok(broken.requests >= 2);
      await waitFor(() => inFlight(alone, 'broken') === 0, 2000, 'the broken pod`s slots released');
    } finally {
      await alone.close();
    }

    const good = await startRawPod(MODEL, whole());
    const both = await stackOf([podEntry('broken', broken), podEntry('good', good)], {
      limits: { maxRetries: 2 },
    });
    try {
      const before = broken.requests;
      // The router picks at random among near-ties: ask until the broken pod was tried at least once.
      for (let i = 0; i < 20 && broken.requests === before; i++) {
        const response = await postJson(`${both.api}/v1/chat/completions`, chatBody('hi', { stream: i % 2 === 1 }));
        const text = await response.text();
        assert.equal(response.status, 200, text);
        assert.equal(response.headers.get('x-kinference-route'), 'local/good');
      }
      assert.ok(broken.requests > before, 'the broken pod was tried');
      await waitFor(() => inFlight(both, 'broken') === 0, 2000, 'the broken pod`s slot released');
    } finally {
      await both.close();
      await good.close();
      await broken.close();
    }
  });
}

/** A chunked event stream answering request `index`, then `after` right behind it or `laterMs` later. */
const streamed =
  (after: string, laterMs?: number): RawAnswer =>
  (socket, index, done) => {
    const event = `data: {"choices":[{"index":0,"delta":{"content":"answer ${index}"}}]}\n\n`;
    const answer =
      'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n' +
      `${Buffer.byteLength(event).toString(16)}\r\n${event}\r\n0\r\n\r\n`;
    if (laterMs === undefined) socket.write(answer + after);
    else {
      socket.write(answer);
      setTimeout(() => socket.write(after), laterMs);
    }
    done();
  };

const SMUGGLED = COMPLETION(999);
const EXTRA = `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`;

for (const [what, answer, stream] of [
  ['whole, bytes in the same write', whole(EXTRA), false],
  ['streamed, bytes in the same write', streamed(EXTRA), true],
  ['streamed, bytes written after the answer', streamed(EXTRA, 30), true],
] as const) {
  test(`bytes a pod writes after its answer never become the next client's answer (${what})`, async () => {
    const pod = await startRawPod(MODEL, answer);
    const stack = await stackOf([podEntry('chatty', pod)]);
    try {
      for (let i = 0; i < 3; i++) {
        const response = await postJson(`${stack.api}/v1/chat/completions`, chatBody('hi', { stream }));
        const text = await response.text();
        assert.equal(response.status, 200, text);
        assert.doesNotMatch(text, /answer 999/);
        assert.match(text, new RegExp(`answer ${i}`));
        await new Promise((r) => setTimeout(r, 60));
      }
    } finally {
      await stack.close();
      await pod.close();
    }
  });
}

/** The answer read from `socket`: its head, then as many body bytes as its Content-Length says. */
function answerOn(socket: Socket): Promise<string> {
  return new Promise((resolve) => {
    let got = '';
    const onData = (data: Buffer) => {
      got += data.toString('latin1');
      const end = got.indexOf('\r\n\r\n');
      if (end < 0) return;
      const length = Number(/content-length: *(\d+)/i.exec(got.slice(0, end))?.[1] ?? 0);
      if (got.length < end + 4 + length) return;
      socket.off('data', onData);
      resolve(got);
    };
    socket.on('data', onData);
  });
}

// The bytes come in the same turn of the agent's event loop as the next client's request, on the
// kept-alive connection that request will use: a client that wrote it on that connection at once
// (the hand-written one did) read the bytes as its answer. Written in one tick here, both reach
// the agent's sockets before it next polls, the client's first.
test('bytes a pod writes after its answer, arriving with the next request, never become its answer', async () => {
  const podSockets: Socket[] = [];
  const pod = await startRawPod(MODEL, (socket, index, done) => {
    podSockets[index] = socket;
    // Every later answer comes well after the stray bytes.
    setTimeout(() => (socket.write(wholeAnswer(index)), done()), index === 0 ? 0 : 50);
  });
  const stack = await stackOf([podEntry('chatty', pod)]);
  const { hostname, port } = new URL(stack.api);
  const client = connect(Number(port), hostname);
  try {
    await new Promise((resolve) => client.once('connect', resolve));
    const body = JSON.stringify(chatBody('hi'));
    const request = `POST /v1/chat/completions HTTP/1.1\r\nhost: ${hostname}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`;
    let answer = answerOn(client);
    client.write(request);
    assert.match(await answer, /answer 0/);
    await new Promise((r) => setTimeout(r, 50)); // the pod's connection is idle, kept alive
    answer = answerOn(client);
    client.write(request);
    podSockets[0].write(EXTRA);
    const text = await answer;
    assert.match(text, /^HTTP\/1\.1 200 /);
    assert.doesNotMatch(text, /answer 999/);
    assert.match(text, /answer 1/);
  } finally {
    client.destroy();
    await stack.close();
    await pod.close();
  }
});

test('passthrough routes keep to a pod`s in-flight cap (maxConcurrency: 1)', async () => {
  const held: (() => void)[] = [];
  const pod = await startRawPod(MODEL, (socket, index, done) => {
    held.push(() => {
      const body = JSON.stringify({ results: [{ index, relevance_score: 0.5 }] });
      socket.write(
        `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
      done();
    });
  });
  const stack = await stackOf([podEntry('single', pod, { maxConcurrency: 1 })], {
    policies: [{ metadata: { name: 'default', namespace: '*' }, spec: { wait: { max: '5s' } } }],
  });
  try {
    const answers = Array.from({ length: 4 }, () =>
      postJson(`${stack.api}/v1/rerank`, { model: MODEL, query: 'q', documents: ['a', 'b'] }),
    );
    // Release the one request the pod holds, one at a time, until all four are answered.
    let answered = 0;
    void Promise.all(answers).then(() => (answered = 4));
    while (answered < 4) {
      await waitFor(() => held.length > 0 || answered === 4, 5000, 'a request at the pod');
      held.shift()?.();
      await new Promise((r) => setTimeout(r, 20));
    }
    for (const response of await Promise.all(answers)) assert.equal(response.status, 200, await response.text());
    assert.equal(pod.requests, 4);
    assert.equal(pod.mostOpen, 1, 'never more than maxConcurrency requests at the pod');
  } finally {
    await stack.close();
    await pod.close();
  }
});
