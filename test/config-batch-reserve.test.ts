// limits.leavableBatchReserve: the share of a pod's batch that requests which may leave leave free
// for must-stay ones is a setting, bounded, with the pool's default when unset.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { settingsFromObject } from '../agent/config/load.ts';
import { DEFAULT_LEAVABLE_BATCH_RESERVE } from '../agent/pool/options.ts';

const base = {
  node: 'n1',
  listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0' },
  pods: [{ name: 'p0', namespace: 'ns', address: '127.0.0.1:8000', engine: 'vllm', models: ['m'] }],
};

test('unset, the reserve is the pool default; set, it is what the config says', () => {
  assert.equal(settingsFromObject(base).limits.leavableBatchReserve, DEFAULT_LEAVABLE_BATCH_RESERVE);
  assert.equal(
    settingsFromObject({ ...base, limits: { leavableBatchReserve: 0.25 } }).limits.leavableBatchReserve,
    0.25,
  );
});

test('a reserve outside 0–0.9 is refused, naming the key', () => {
  assert.throws(() => settingsFromObject({ ...base, limits: { leavableBatchReserve: 1.5 } }), /leavableBatchReserve/);
  assert.throws(() => settingsFromObject({ ...base, limits: { leavableBatchReserve: -0.1 } }), /leavableBatchReserve/);
});
