// /metrics does not grow with the cluster: a series per local pod, peers folded into their node
// (its fastest pod), and only the fastest nodes up to the bound.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMetrics, podPredictionsOf } from '../agent/server/observability/metrics.ts';

const state = (nodes: number, podsPerNode: number) => ({
  local: [{ pod: { name: 'mine' }, predictedTtftMs: 40 }],
  remote: Array.from({ length: nodes * podsPerNode }, (_, i) => ({
    pod: { node: `node-${Math.floor(i / podsPerNode)}` },
    // node-k's pods predict 100 + k ms and up: node-0 is the fastest.
    predictedTtftMs: 100 + Math.floor(i / podsPerNode) + (i % podsPerNode) * 10,
  })),
});

test('peers are folded into their node, the fastest nodes only', () => {
  const p = podPredictionsOf(state(5, 3), 2);
  assert.deepEqual(p.local, [{ pod: 'mine', seconds: 0.04 }]);
  assert.deepEqual(p.peerNodes, [
    { node: 'node-0', seconds: 0.1 },
    { node: 'node-1', seconds: 0.101 },
  ]);
});

test('the page has one series per local pod and per shown node, however many peer pods there are', async () => {
  const page = async (nodes: number) => {
    const metrics = createMetrics({ podPredictions: () => podPredictionsOf(state(nodes, 8), 10) });
    return metrics.registry.metrics();
  };
  const small = await page(20);
  const large = await page(500);
  assert.equal(large.length, small.length);
  assert.match(large, /kinference_pod_predicted_ttft_seconds\{pod="mine",where="local"\} 0\.04/);
  assert.match(large, /kinference_peer_node_predicted_ttft_seconds\{node="node-0"\} 0\.1\n/);
  assert.equal(large.match(/^kinference_peer_node_predicted_ttft_seconds\{/gm)?.length, 10);
});
