// The gossip wire format: shared/proto/gossip.proto, loaded at run time (the .proto is the only
// definition; protobufjs compiles the same encoders static code generation would have), plus
// typed plain-data views and validation of everything a peer sends (exact encoded sizes: wire-size.ts).
import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';
import type { Engine } from '../types.ts';
import type { ProbeKind, ProbeMessage } from './probe.ts';
import { loraProblem, type LoraWire } from './lora-wire.ts';
import { calibrationProblem } from './calibration-wire.ts';

const PROTO_PATH = fileURLToPath(new URL('../../shared/proto/gossip.proto', import.meta.url));

const root = protobuf.loadSync(PROTO_PATH);
const types = {
  envelope: root.lookupType('kinference.gossip.v1.Envelope'),
  payload: root.lookupType('kinference.gossip.v1.Payload'),
  podEntry: root.lookupType('kinference.gossip.v1.PodEntry'),
  podInfo: root.lookupType('kinference.gossip.v1.PodInfo'),
  originDelta: root.lookupType('kinference.gossip.v1.OriginDelta'),
  digest: root.lookupType('kinference.gossip.v1.Digest'),
};
/** The loaded message types, for tests that compare this module's sizes with protobufjs's. */
export const wireTypes = types;

export interface PodInfoWire {
  /** '' when the uid travels as `uuid`, or is `namespace/name` (see records.ts). */
  uid: string;
  /** 16 bytes when the uid is a UUID (every Kubernetes uid), else absent. */
  uuid?: Uint8Array;
  name: string;
  namespace: string;
  /** '' when the pod runs on the origin's node. */
  node: string;
  address: string;
  models: string[];
  /** 0 unknown, 1 vllm, 2 tgi, 3 sglang. */
  engine: number;
}

export interface PodEntryWire extends Partial<LoraWire> {
  slot: number;
  version: number;
  info?: PodInfoWire;
  removed: boolean;
  queued: number;
  queuedNow: number;
  running: number;
  kvCache: number;
  /** base, perQueued, perRunning, perKPromptTokens; empty on tombstones. */
  params: number[];
  /** Origin clock, ms since the origin's incarnation. */
  at: number;
  /** The pod's prefix summary (agent/prefix/summary.ts), when its agent follows its KV events. */
  prefixSummary?: Uint8Array;
  // LoRA slots (vLLM): LoraWire's fields 50-52, all absent without LoRA state.
  /** The pod's calibration summary (calibration-wire.ts), when its agent has observations. */
  calibration?: Uint8Array;
}

export interface OriginDeltaWire {
  origin: number;
  from: number;
  to: number;
  ageMs: number;
  /** Only when from = 0. */
  node: string;
  incarnation: number;
  floor: number;
  continuesFull: boolean;
  pods: PodEntryWire[];
  /** Only when from = 0: the origin agent's gossip address ('' when it does not know it). */
  agent: string;
  /** Only when from = 0, from a signing origin: its raw Ed25519 public key. */
  key?: Uint8Array;
  /** The origin's signature over its state at `to` (agent/gossip/signatures.ts). */
  stamp?: Uint8Array;
}

export interface DigestWire {
  origins: number[];
  versions: number[];
  /** Same length as origins, or empty (want). */
  dataLag: number[];
  shard: number;
  /** 0: no completeness claim. */
  shards: number;
}

export interface PayloadWire {
  digest?: DigestWire;
  want?: DigestWire;
  heartbeats?: DigestWire;
  offers?: DigestWire;
  deltas: OriginDeltaWire[];
  /** An encoded BudgetGossip (agent/budget/wire.ts), carried undecoded. */
  budget?: Uint8Array;
  /** Failure detection (agent/gossip/probe.ts). */
  probe?: ProbeMessage;
  /** A key-binding challenge or answer (agent/gossip/binding.ts). */
  binding?: BindingWire;
}

export interface BindingWire {
  nonce: Uint8Array;
  answer: boolean;
  key?: Uint8Array;
  token?: string;
  signature?: Uint8Array;
}

export interface EnvelopeWire {
  sender: string;
  boot: number;
  seq: number;
  sentAt: number;
  payload: Uint8Array;
  /** The gossip address the datagram was sent to. */
  recipient: string;
}

/** What a peer may send; anything beyond is a malformed datagram (bounded memory per estimate). */
export const WIRE_LIMITS = {
  stringChars: 253,
  models: 16,
  podsPerDelta: 512,
  deltasPerPayload: 2048,
  digestEntries: 8192,
};

export class WireError extends Error {}

/** Predictor coefficients per pod entry: base, queued, running, prompt, then optional ones. */
const MIN_PARAMS = 4;
const MAX_PARAMS = 8;

const ENGINE_CODES: Record<Engine, number> = { vllm: 1, tgi: 2, sglang: 3 };
const ENGINE_NAMES: (Engine | undefined)[] = [undefined, 'vllm', 'tgi', 'sglang'];
export const engineCode = (engine: Engine | undefined): number => (engine ? ENGINE_CODES[engine] : 0);
export const engineName = (code: number): Engine | undefined => ENGINE_NAMES[code];

/**
 * The wire id of one origin incarnation. A restarted agent is a new origin instance, so its
 * versions can start again from 1 without anyone mistaking them for old ones.
 */
export function originId(node: string, incarnation: number): number {
  const key = `${node}\0${incarnation}`;
  let id = originIds.get(key);
  if (id === undefined) {
    id = createHash('sha256').update(key).digest().readUInt32BE(0) || 1; // 0 would read as "absent"
    if (originIds.size >= 16_384) originIds.delete(originIds.keys().next().value!);
    originIds.set(key, id);
  }
  return id;
}
// Every full state received is checked against its id: remember the few thousand in use.
const originIds = new Map<string, number>();

// --- encoding -------------------------------------------------------------------------------

export function encodePayload(payload: PayloadWire): Uint8Array {
  if (!payload.probe) return types.payload.encode(payload).finish();
  const probe = { ...payload.probe, kind: PROBE_KINDS.indexOf(payload.probe.kind) };
  return types.payload.encode({ ...payload, probe }).finish();
}

/** Probe.Kind's numbers, in order. */
const PROBE_KINDS: readonly ProbeKind[] = ['news', 'ping', 'ack', 'ping-req'];
/** Notices one probe message may carry. */
const MAX_NOTICES = 32;

function decodeProbe(m: Decoded): ProbeMessage {
  const kind = PROBE_KINDS[num(m.kind)];
  if (kind === undefined) throw new WireError('unknown probe kind');
  const notices = (m.notices as Decoded[] | undefined) ?? [];
  if (notices.length > MAX_NOTICES) throw new WireError('too many notices');
  return {
    kind,
    seq: num(m.seq),
    target: str(m.target, 'probe target'),
    notices: notices.map((n) => ({
      agent: str(n.agent, 'notice agent'),
      incarnation: num(n.incarnation),
      down: n.down === true,
    })),
  };
}

export function encodeEnvelopeBody(envelope: EnvelopeWire): Uint8Array {
  return types.envelope.encode(envelope).finish();
}

// --- decoding and validation ----------------------------------------------------------------

type Long = { toNumber(): number };
type Decoded = Record<string, unknown>;

const num = (v: unknown): number => (typeof v === 'number' ? v : v == null ? 0 : (v as Long).toNumber());

function str(v: unknown, what: string): string {
  const s = (v as string | undefined) ?? '';
  if (s.length > WIRE_LIMITS.stringChars) throw new WireError(`${what} longer than ${WIRE_LIMITS.stringChars}`);
  return s;
}

function finite(v: unknown, what: string): number {
  const n = (v as number | undefined) ?? 0;
  if (!Number.isFinite(n)) throw new WireError(`${what} is not finite`);
  return n;
}

function decodeInfo(m: Decoded): PodInfoWire {
  const models = (m.models as string[] | undefined) ?? [];
  if (models.length > WIRE_LIMITS.models) throw new WireError(`more than ${WIRE_LIMITS.models} models`);
  const engine = (m.engine as number | undefined) ?? 0;
  const uuid = m.uuid as Uint8Array | undefined;
  if (uuid?.length && uuid.length !== 16) throw new WireError('a uuid has 16 bytes');
  return {
    uid: str(m.uid, 'uid'),
    uuid: uuid?.length ? uuid : undefined,
    name: str(m.name, 'name'),
    namespace: str(m.namespace, 'namespace'),
    node: str(m.node, 'node'),
    address: str(m.address, 'address'),
    models: models.map((x) => str(x, 'model')),
    engine: ENGINE_NAMES[engine] ? engine : 0, // an engine newer than us: unknown, not an error
  };
}

function decodeEntry(m: Decoded): PodEntryWire {
  const params = (m.params as number[] | undefined) ?? [];
  // Four coefficients from the first version on; later ones are optional (older agents send 4).
  if (params.length !== 0 && (params.length < MIN_PARAMS || params.length > MAX_PARAMS)) {
    throw new WireError(`params must hold ${MIN_PARAMS} to ${MAX_PARAMS} values`);
  }
  for (const p of params) finite(p, 'param');
  const kvCache = (m.kvCache as number | undefined) ?? 0;
  if (Number.isFinite(kvCache) === false && !Number.isNaN(kvCache)) throw new WireError('kvCache is infinite');
  const info = m.info ? decodeInfo(m.info as Decoded) : undefined;
  const removed = (m.removed as boolean | undefined) ?? false;
  if (!removed && params.length < MIN_PARAMS) throw new WireError('a live pod entry needs params');
  const summary = m.prefixSummary as Uint8Array | undefined;
  if (summary?.length && summary.length > MAX_PREFIX_SUMMARY_BYTES) throw new WireError('prefix summary too large');
  const lora = decodeLora(m);
  const calibration = m.calibration as Uint8Array | undefined;
  const calibrationError = calibration?.length ? calibrationProblem(calibration) : undefined;
  if (calibrationError) throw new WireError(calibrationError);
  return {
    slot: num(m.slot),
    version: num(m.version),
    info,
    removed,
    queued: finite(m.queued, 'queued'),
    queuedNow: num(m.queuedNow),
    running: num(m.running),
    kvCache,
    params,
    at: num(m.at),
    ...(summary?.length ? { prefixSummary: summary } : {}),
    ...lora,
    // A copy: 8 bytes should not keep the datagram they came in alive.
    ...(calibration?.length ? { calibration: Uint8Array.from(calibration) } : {}),
  };
}

function decodeLora(m: Decoded): LoraWire | undefined {
  const lora = {
    maxLora: num(m.maxLora),
    loraResident: (m.loraResident as string[] | undefined) ?? [],
    loraRunning: (m.loraRunning as number[] | undefined) ?? [],
  };
  const problem = loraProblem(lora);
  if (problem) throw new WireError(problem);
  return lora.maxLora ? lora : undefined;
}

/** The largest prefix summary a peer may send (ours are 256 bytes). */
const MAX_PREFIX_SUMMARY_BYTES = 1024;

function decodeDelta(m: Decoded): OriginDeltaWire {
  const pods = (m.pods as Decoded[] | undefined) ?? [];
  if (pods.length > WIRE_LIMITS.podsPerDelta) throw new WireError('too many pods in a delta');
  const delta: OriginDeltaWire = {
    origin: num(m.origin),
    from: num(m.from),
    to: num(m.to),
    ageMs: num(m.ageMs),
    node: str(m.node, 'node'),
    incarnation: num(m.incarnation),
    floor: num(m.floor),
    continuesFull: (m.continuesFull as boolean | undefined) ?? false,
    pods: pods.map(decodeEntry),
    agent: str(m.agent, 'agent'),
    ...optionalBytes('key', m.key, 32),
    ...optionalBytes('stamp', m.stamp, 64),
  };
  if (delta.from === 0 && !delta.node) throw new WireError('a delta from version 0 must name its node');
  if (delta.from >= delta.to) throw new WireError('a delta must end after it starts');
  let last = delta.from;
  for (const p of delta.pods) {
    // Version order, inside (from, to]: what makes a prefix a prefix.
    if (p.version < last || p.version <= delta.from || p.version > delta.to)
      throw new WireError('pod entries out of version order');
    last = p.version;
  }
  return delta;
}

function optionalBytes(name: 'key' | 'stamp', v: unknown, length: number): { key?: Uint8Array; stamp?: Uint8Array } {
  const bytes = v as Uint8Array | undefined;
  if (!bytes?.length) return {};
  if (bytes.length !== length) throw new WireError(`a ${name} has ${length} bytes`);
  return { [name]: bytes };
}

function decodeDigest(m: Decoded | undefined): DigestWire | undefined {
  if (!m) return undefined;
  const origins = (m.origins as number[] | undefined) ?? [];
  const versions = (m.versions as number[] | undefined) ?? [];
  const dataLag = (m.dataLag as number[] | undefined) ?? [];
  if (origins.length > WIRE_LIMITS.digestEntries) throw new WireError('digest too long');
  if (versions.length !== origins.length) throw new WireError('digest arrays differ in length');
  if (dataLag.length !== 0 && dataLag.length !== origins.length) throw new WireError('digest arrays differ in length');
  const shards = num(m.shards);
  const shard = num(m.shard);
  if (shards !== 0 && ((shards & (shards - 1)) !== 0 || shard >= shards)) throw new WireError('bad digest shard');
  return { origins, versions, dataLag, shard, shards };
}

/** Decodes and validates a payload; throws WireError, and only WireError, when malformed. */
export function decodePayload(bytes: Uint8Array): PayloadWire {
  try {
    return decodePayloadUnchecked(bytes);
  } catch (error) {
    // protobufjs (truncation, wire types) and the UTF-8 decoder (invalid strings) throw their own
    // errors; callers should only need to know the datagram was malformed.
    throw error instanceof WireError ? error : new WireError(`malformed payload: ${(error as Error).message}`);
  }
}

function decodePayloadUnchecked(bytes: Uint8Array): PayloadWire {
  const m = types.payload.decode(bytes) as unknown as Decoded;
  const deltas = (m.deltas as Decoded[] | undefined) ?? [];
  if (deltas.length > WIRE_LIMITS.deltasPerPayload) throw new WireError('too many deltas');
  return {
    digest: decodeDigest(m.digest as Decoded | undefined),
    want: decodeDigest(m.want as Decoded | undefined),
    heartbeats: decodeDigest(m.heartbeats as Decoded | undefined),
    offers: decodeDigest(m.offers as Decoded | undefined),
    deltas: deltas.map(decodeDelta),
    ...((m.budget as Uint8Array | undefined)?.length ? { budget: m.budget as Uint8Array } : {}),
    ...(m.probe ? { probe: decodeProbe(m.probe as Decoded) } : {}),
    ...(m.binding ? { binding: decodeBinding(m.binding as Decoded) } : {}),
  };
}

function decodeBinding(m: Decoded): BindingWire {
  const nonce = (m.nonce as Uint8Array | undefined) ?? new Uint8Array(0);
  if (nonce.length !== 16) throw new WireError('a binding nonce has 16 bytes');
  const token = (m.token as string | undefined) ?? '';
  if (token.length > 8192) throw new WireError('binding token too long'); // a ServiceAccount JWT is ~1-1.5 KB
  return {
    nonce,
    answer: m.answer === true,
    ...optionalBytes('key', m.key, 32),
    ...(token ? { token } : {}),
    ...((m.signature as Uint8Array | undefined)?.length ? { signature: m.signature as Uint8Array } : {}),
  };
}

export function decodeEnvelopeBody(bytes: Uint8Array): EnvelopeWire {
  const m = types.envelope.decode(bytes) as unknown as Decoded;
  return {
    sender: str(m.sender, 'sender'),
    boot: num(m.boot),
    seq: num(m.seq),
    sentAt: num(m.sentAt),
    payload: (m.payload as Uint8Array | undefined) ?? new Uint8Array(0),
    recipient: str(m.recipient, 'recipient'),
  };
}
