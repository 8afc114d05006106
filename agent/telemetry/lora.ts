// vLLM's LoRA gauge, `vllm:lora_requests_info{max_lora, running_lora_adapters, waiting_lora_adapters}`,
// read as what a router needs: which adapters hold GPU slots now. The gauge keeps every label set
// it ever set, each valued with the time it was last set. Its running list is request activity,
// not residency: an adapter whose requests finished stays loaded until a newer one evicts it
// (vLLM's slots are least-recently-used). So residency is rebuilt from the history: the adapters
// of the newest running lists, newest first, up to max_lora.
import type { LoraState } from '../types.ts';

export const LORA_INFO = 'vllm:lora_requests_info';
export const LORA_LABELS = ['max_lora', 'running_lora_adapters', 'waiting_lora_adapters'] as const;

/** Most label sets read from one page: the gauge grows without bound in a long-lived server. */
const MAX_SERIES_READ = 512;

const split = (list: string | undefined) =>
  (list ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');

/** The pod's LoRA state from the gauge's series; undefined when it has none (LoRA off). */
export function loraStateOf(
  series: readonly { labels: Record<string, string>; value: number }[],
): LoraState | undefined {
  if (series.length === 0) return undefined;
  const newest = [...series]
    .filter((s) => Number.isFinite(s.value))
    .sort((a, b) => b.value - a.value)
    .slice(0, MAX_SERIES_READ);
  const latest = newest[0];
  if (!latest) return undefined;
  const maxLora = Number(latest.labels.max_lora);
  if (!Number.isInteger(maxLora) || maxLora < 1) return undefined;
  const resident: string[] = [];
  for (const s of newest) {
    for (const adapter of split(s.labels.running_lora_adapters))
      if (!resident.includes(adapter) && resident.length < maxLora) resident.push(adapter);
    if (resident.length >= maxLora) break;
  }
  return {
    maxLora,
    running: split(latest.labels.running_lora_adapters),
    waiting: split(latest.labels.waiting_lora_adapters),
    resident,
  };
}
