// Exact encoded sizes of the gossip's messages (what protobufjs writes: proto3 defaults are
// omitted), so the state machine can fill a datagram to its budget without encoding twice.
import { varintSize } from '../../shared/varint.ts';
import { loraSize, type LoraWire } from './lora-wire.ts';
import type { DigestWire, OriginDeltaWire, PodEntryWire, PodInfoWire } from './wire.ts';

const zigzag = (n: number): number => (n >= 0 ? n * 2 : -n * 2 - 1);
const scalar = (n: number): number => (n === 0 ? 0 : 1 + varintSize(n));
const bytesField = (length: number): number => 1 + varintSize(length) + length;
const stringSize = (s: string): number => (s === '' ? 0 : bytesField(Buffer.byteLength(s)));
const floatSize = (x: number): number => (Object.is(x, 0) ? 0 : 5);

/** Encoded size of the `info` field of a PodEntry (tag and length included). */
export function infoFieldSize(info: PodInfoWire): number {
  let body =
    stringSize(info.uid) +
    stringSize(info.name) +
    stringSize(info.namespace) +
    stringSize(info.node) +
    stringSize(info.address);
  for (const m of info.models) body += bytesField(Buffer.byteLength(m));
  body += scalar(info.engine);
  if (info.uuid) body += bytesField(info.uuid.length);
  return bytesField(body);
}

/** Encoded size of a PodEntry without its `info` field. */
export function entrySize(e: PodEntryWire): number {
  return (
    scalar(e.slot) +
    scalar(e.version) +
    (e.removed ? 2 : 0) +
    floatSize(e.queued) +
    scalar(e.queuedNow) +
    scalar(e.running) +
    floatSize(e.kvCache) +
    (e.params.length ? bytesField(4 * e.params.length) : 0) +
    (e.at === 0 ? 0 : 1 + varintSize(zigzag(e.at))) +
    // Field 40: a two-byte tag.
    (e.prefixSummary?.length ? 1 + bytesField(e.prefixSummary.length) : 0) +
    (e.maxLora ? loraSize(e as LoraWire) : 0) +
    // Field 60: a two-byte tag.
    (e.calibration?.length ? 1 + bytesField(e.calibration.length) : 0)
  );
}

/** Encoded size of an OriginDelta's own fields (without its pods). */
export function deltaHeaderSize(d: Omit<OriginDeltaWire, 'pods'>): number {
  return (
    5 +
    scalar(d.from) +
    scalar(d.to) +
    scalar(d.ageMs) +
    stringSize(d.node) +
    scalar(d.incarnation) +
    scalar(d.floor) +
    (d.continuesFull ? 2 : 0) +
    stringSize(d.agent) +
    (d.key?.length ? 2 + bytesField(d.key.length) - 1 : 0) +
    (d.stamp?.length ? 2 + bytesField(d.stamp.length) - 1 : 0)
  );
}

/** Bytes a message of `size` adds as a field of its parent (tag and length prefix included). */
export const fieldSize = (size: number): number => bytesField(size);

/** Encoded size of a digest's body; one entry costs 4 + varint(version) + varint(lag) bytes. */
export function digestSize(d: DigestWire): number {
  const n = d.origins.length;
  let versions = 0;
  for (const v of d.versions) versions += varintSize(v);
  let lags = 0;
  for (const v of d.dataLag) lags += varintSize(v);
  return (
    (n ? bytesField(4 * n) : 0) +
    (n ? bytesField(versions) : 0) +
    (d.dataLag.length ? bytesField(lags) : 0) +
    scalar(d.shard) +
    scalar(d.shards)
  );
}

/** The longest `host:port` a recipient can be (a bracketed IPv6 literal and a port). */
const MAX_ADDRESS_BYTES = 47;

/** Envelope bytes around a payload of up to 16 KiB, at the largest the counters can grow to. */
export function envelopeOverhead(sender: string, boot: number): number {
  const seq = 6; // uint32 varint
  const sentAt = 9; // uint64 varint up to 2^56 ms
  const payloadPrefix = 3; // tag + 2-byte length
  const tag = 34; // tag + length + 32-byte HMAC
  const recipient = 3 + MAX_ADDRESS_BYTES; // field 30: a two-byte tag and a length
  return stringSize(sender) + scalar(boot) + seq + sentAt + payloadPrefix + recipient + tag;
}
