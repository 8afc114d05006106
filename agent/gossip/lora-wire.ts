// A pod's LoRA slots on the gossip wire (PodEntry fields 50-52), pure: what an origin sends of its
// pod's adapters (the most recently used within bounds: a datagram holds a node's pods), what a
// receiver accepts, and the pod and LoRA state a router then sees. A peer's pod is a candidate
// for the adapters it holds; the rest of what it serves is not gossiped (a registry of dozens).
import type { LoraState, Pod } from '../types.ts';
import { varintSize } from '../../shared/varint.ts';

/** PodEntry's fields 50-52 as protobufjs names them. */
export interface LoraWire {
  maxLora: number;
  /** Adapters holding a slot, most recently used first. */
  loraResident: string[];
  /** Which of `loraResident` run requests now (indexes). */
  loraRunning: number[];
}

/** What one pod entry may say of LoRA adapters. */
export const LORA_WIRE_LIMITS = { names: 16, nameChars: 128, maxLora: 1024 };

/** Why a received entry's LoRA fields are malformed, if they are. */
export function loraProblem(l: LoraWire): string | undefined {
  const { names, nameChars, maxLora } = LORA_WIRE_LIMITS;
  if (l.maxLora === 0)
    return l.loraResident.length || l.loraRunning.length ? 'LoRA adapters without max_lora' : undefined;
  if (l.maxLora > maxLora) return `max_lora above ${maxLora}`;
  if (l.loraResident.length > names) return `more than ${names} LoRA adapters`;
  if (l.loraResident.some((n) => n === '' || n.length > nameChars)) return 'a LoRA adapter name is empty or too long';
  if (l.loraRunning.some((i) => i >= l.loraResident.length)) return 'a running LoRA index out of range';
  return undefined;
}

const bytesField = (length: number): number => 1 + varintSize(length) + length;

/** Encoded size of fields 50-52 (two-byte tags): max_lora, each name, the packed indexes. */
export function loraSize(l: LoraWire): number {
  let size = 2 + varintSize(l.maxLora);
  for (const name of l.loraResident) size += 1 + bytesField(Buffer.byteLength(name));
  if (l.loraRunning.length) size += 1 + bytesField(l.loraRunning.reduce((n, i) => n + varintSize(i), 0));
  return size;
}

/** A pod's LoRA state as gossiped: the most recently used adapters within the wire's bounds. */
export function loraWireOf(lora: LoraState): LoraWire {
  const { names, nameChars, maxLora } = LORA_WIRE_LIMITS;
  const resident = lora.resident.filter((n) => n !== '' && n.length <= nameChars).slice(0, names);
  const running = lora.running.map((n) => resident.indexOf(n)).filter((i) => i >= 0);
  return { maxLora: Math.min(lora.maxLora, maxLora), loraResident: resident, loraRunning: running };
}

/** The LoRA state a received pod entry carries, if any. */
export function loraOf(e: Partial<LoraWire>): LoraState | undefined {
  if (!e.maxLora || !e.loraResident) return undefined;
  const resident = e.loraResident;
  return { maxLora: e.maxLora, resident, running: (e.loraRunning ?? []).map((i) => resident[i]), waiting: [] };
}

/** A peer's pod as the router sees it: its base models, and the adapters it holds. */
export function withResident(pod: Pod, lora: LoraState | undefined): Pod {
  if (!lora?.resident.length) return pod;
  return { ...pod, models: [...new Set([...pod.models, ...lora.resident])], adapters: lora.resident };
}

/** Whether two entries say the same of LoRA (a change is worth a new version). */
export function sameLora(a: Partial<LoraWire>, b: Partial<LoraWire>): boolean {
  const same = <T>(x: readonly T[] = [], y: readonly T[] = []) =>
    x.length === y.length && x.every((v, i) => v === y[i]);
  return (
    (a.maxLora ?? 0) === (b.maxLora ?? 0) && same(a.loraResident, b.loraResident) && same(a.loraRunning, b.loraRunning)
  );
}
