// vLLM's KV-cache events as they arrive on the wire, decoded and checked. Pure (no sockets).
//
// A vLLM pod started with --kv-events-config publishes on a ZMQ PUB socket, per scheduler step,
// the multipart message [topic, sequence (8-byte big-endian), payload], where the payload is the
// msgpack of KVEventBatch{ts, events, data_parallel_rank}. Each event is a tagged msgspec struct:
// BlockStored{block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name,
// extra_keys, group_idx, …}, BlockRemoved{block_hashes, medium, group_idx} or AllBlocksCleared.
// vLLM encoded these structs as positional arrays ([tag, field, …]) until mid-2026 and as maps
// with the tag under "type" since; both are read here, the way one consumer must meet both
// engine versions. A block hash is a uint64 (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES) or raw bytes.
// Whatever does not have that shape is refused with a reason, never half-applied.

import { decode } from '@msgpack/msgpack';

/** A block's hash as the engine names it, made a string: `i:<decimal>` for ints, `b:<hex>` for bytes. */
export type EngineBlockHash = string;

export type KvEvent =
  | {
      type: 'stored';
      hashes: EngineBlockHash[];
      parent: EngineBlockHash | undefined;
      tokenIds: number[];
      blockSize: number;
      /** The adapter the blocks were computed under (lora_name, else lora_id as a string). */
      lora: string | undefined;
      /** "GPU" for device blocks; offload tiers (CPU, disk) name themselves. */
      medium: string | undefined;
      /** KV-cache group (hybrid models have several); undefined on engines that do not say. */
      group: number | undefined;
    }
  | { type: 'removed'; hashes: EngineBlockHash[]; medium: string | undefined; group: number | undefined }
  | { type: 'cleared' };

export interface KvBatch {
  /** The engine's clock when the batch was made, in seconds. */
  ts: number;
  events: KvEvent[];
  dataParallelRank: number | undefined;
}

export type Decoded<T> = { ok: true; value: T } | { ok: false; error: string };

/** The most bytes one payload may have: a step's events are kilobytes; a bigger one is refused. */
export const DEFAULT_MAX_PAYLOAD_BYTES = 16 * 1024 * 1024;

/** The 8-byte big-endian sequence frame as a bigint; undefined when it is not 8 bytes. */
export function decodeSequence(frame: Uint8Array): bigint | undefined {
  if (frame.length !== 8) return undefined;
  return new DataView(frame.buffer, frame.byteOffset, 8).getBigInt64(0, false);
}

/** A sequence number as the 8 bytes a replay request starts with. */
export function encodeSequence(seq: bigint): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigInt64(0, seq, false);
  return out;
}

/** One payload: msgpack of a KVEventBatch, in either struct encoding. */
export function decodeBatch(payload: Uint8Array, maxBytes = DEFAULT_MAX_PAYLOAD_BYTES): Decoded<KvBatch> {
  if (payload.length > maxBytes) return fail(`payload of ${payload.length} bytes is over the ${maxBytes}-byte limit`);
  let raw: unknown;
  try {
    // bigints, so a uint64 hash above 2^53 keeps every bit.
    raw = decode(payload, { useBigInt64: true });
  } catch (err) {
    return fail(`not msgpack: ${(err as Error).message}`);
  }
  let ts: unknown, events: unknown, rank: unknown;
  if (Array.isArray(raw)) [ts, events, rank] = raw;
  else if (isRecord(raw)) ({ ts, events, data_parallel_rank: rank } = raw);
  else return fail('batch is neither an array nor a map');
  const tsNumber = toNumber(ts);
  if (tsNumber === undefined) return fail('batch ts is not a number');
  if (!Array.isArray(events)) return fail('batch events is not an array');
  const out: KvEvent[] = [];
  for (const [i, e] of events.entries()) {
    const decoded = decodeEvent(e);
    if (!decoded.ok) return fail(`event ${i}: ${decoded.error}`);
    out.push(decoded.value);
  }
  const dataParallelRank = rank === null || rank === undefined ? undefined : toNumber(rank);
  return { ok: true, value: { ts: tsNumber, events: out, dataParallelRank } };
}

// Positional field order of the array encoding, after the tag (vLLM's struct declaration order).
const STORED_FIELDS = [
  'block_hashes',
  'parent_block_hash',
  'token_ids',
  'block_size',
  'lora_id',
  'medium',
  'lora_name',
  'extra_keys',
  'group_idx',
] as const;
const REMOVED_FIELDS = ['block_hashes', 'medium', 'group_idx'] as const;

function decodeEvent(raw: unknown): Decoded<KvEvent> {
  let tag: unknown;
  let fields: Record<string, unknown>;
  if (Array.isArray(raw)) {
    tag = raw[0];
    const names = tag === 'BlockStored' ? STORED_FIELDS : tag === 'BlockRemoved' ? REMOVED_FIELDS : [];
    fields = Object.fromEntries(names.map((name, i) => [name, raw[i + 1]]));
  } else if (isRecord(raw)) {
    tag = raw.type;
    fields = raw;
  } else return fail('event is neither an array nor a map');
  if (tag === 'AllBlocksCleared') return { ok: true, value: { type: 'cleared' } };
  if (tag !== 'BlockStored' && tag !== 'BlockRemoved') {
    return fail(`unknown event type ${JSON.stringify(String(tag)).slice(0, 40)}`);
  }
  const hashes = hashList(fields.block_hashes);
  if (!hashes) return fail('block_hashes is not a list of ints or bytes');
  const medium = optionalString(fields.medium);
  const group = fields.group_idx === undefined || fields.group_idx === null ? undefined : toNumber(fields.group_idx);
  if (tag === 'BlockRemoved') return { ok: true, value: { type: 'removed', hashes, medium, group } };
  const blockSize = toNumber(fields.block_size);
  if (blockSize === undefined || !Number.isInteger(blockSize) || blockSize < 1)
    return fail('block_size is not a positive int');
  const tokenIds = intList(fields.token_ids);
  if (!tokenIds) return fail('token_ids is not a list of ints');
  if (tokenIds.length !== hashes.length * blockSize) {
    return fail(`${tokenIds.length} token ids for ${hashes.length} blocks of ${blockSize}`);
  }
  const parentRaw = fields.parent_block_hash;
  const parent = parentRaw === null || parentRaw === undefined ? undefined : hashOf(parentRaw);
  if (parentRaw !== null && parentRaw !== undefined && parent === undefined)
    return fail('parent_block_hash is not an int or bytes');
  const loraName = optionalString(fields.lora_name);
  const loraId = fields.lora_id === null || fields.lora_id === undefined ? undefined : toNumber(fields.lora_id);
  const lora = loraName ?? (loraId === undefined ? undefined : String(loraId));
  return { ok: true, value: { type: 'stored', hashes, parent, tokenIds, blockSize, lora, medium, group } };
}

function hashOf(v: unknown): EngineBlockHash | undefined {
  if (typeof v === 'bigint') return `i:${BigInt.asUintN(64, v)}`;
  if (typeof v === 'number' && Number.isSafeInteger(v)) return `i:${BigInt.asUintN(64, BigInt(v))}`;
  if (v instanceof Uint8Array) return `b:${Buffer.from(v.buffer, v.byteOffset, v.length).toString('hex')}`;
  return undefined;
}

function hashList(v: unknown): EngineBlockHash[] | undefined {
  if (!Array.isArray(v)) return undefined;
  const out: EngineBlockHash[] = [];
  for (const h of v) {
    const s = hashOf(h);
    if (s === undefined) return undefined;
    out.push(s);
  }
  return out;
}

function intList(v: unknown): number[] | undefined {
  if (!Array.isArray(v)) return undefined;
  const out = new Array<number>(v.length);
  for (let i = 0; i < v.length; i++) {
    const n = toNumber(v[i]);
    if (n === undefined || !Number.isInteger(n)) return undefined;
    out[i] = n;
  }
  return out;
}

function toNumber(v: unknown): number | undefined {
  if (typeof v === 'number' && Number.isFinite(v)) return v;
  if (typeof v === 'bigint') return Number(v);
  return undefined;
}

function optionalString(v: unknown): string | undefined {
  return typeof v === 'string' ? v : undefined;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array);
}

function fail<T>(error: string): Decoded<T> {
  return { ok: false, error };
}
