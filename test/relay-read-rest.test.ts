// readRest: a non-stream answer read whole, bounded by the upstream body limit. The limit holds
// for the first chunk (taken before the rest flows) as for every later one.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readRest, type ChunkSink, type ChunkSource } from '../agent/forward/relay.ts';

/** A source that delivers `chunks` when it flows, and records an abort. */
function sourceOf(chunks: Uint8Array[]): ChunkSource & { aborted?: Error } {
  const source: ChunkSource & { aborted?: Error } = {
    flow(sink: ChunkSink) {
      queueMicrotask(() => {
        for (const chunk of chunks) {
          if (source.aborted) return sink.end(source.aborted);
          sink.data(chunk);
        }
        sink.end(source.aborted);
      });
    },
    resume() {},
    abort(reason: Error) {
      source.aborted = reason;
    },
  };
  return source;
}

test('the chunks are joined in order while they stay within the limit', async () => {
  const body = await readRest(Buffer.from('ab'), sourceOf([Buffer.from('cd'), Buffer.from('ef')]), 6);
  assert.equal(Buffer.from(body).toString(), 'abcdef');
});

test('a later chunk past the limit aborts the upstream and fails the read', async () => {
  const source = sourceOf([Buffer.from('cd'), Buffer.from('efg')]);
  await assert.rejects(readRest(Buffer.from('ab'), source, 6), /larger than 6 bytes/);
  assert.ok(source.aborted);
});

test('a first chunk already past the limit fails the read, with nothing after it', async () => {
  const source = sourceOf([]);
  await assert.rejects(readRest(Buffer.from('abcdefgh'), source, 6), /larger than 6 bytes/);
  assert.ok(source.aborted, 'the upstream is aborted');
});
