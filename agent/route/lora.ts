// LoRA affinity, pure: what running a request with adapter A at a pod adds to its TTFT. A pod
// running A adds nothing; one whose batch has room for another adapter adds A's load (nothing
// when A is still loaded from earlier); one whose batch already runs max_lora other adapters adds
// the wait for one of them to drain. Request activity is not residency (an adapter stays loaded after its requests finish),
// so residency comes from the gauge's history (agent/telemetry/lora.ts) and from what this agent
// sent since the pod's last report.
import type { LoraState } from '../types.ts';

export interface LoraCosts {
  /** Loading an adapter into a GPU slot (ms). */
  loadMs: number;
  /** Waiting for a slot when every slot serves running requests of other adapters (ms). */
  slotWaitMs: number;
}

export const DEFAULT_LORA_COSTS: LoraCosts = { loadMs: 50, slotWaitMs: 2000 };

/** The pod's adapter slots as this agent sees them now. */
export interface LoraView extends LoraState {
  /** Adapters this agent sent to the pod since its last report (loaded by now, or about to be). */
  sentSince: readonly string[];
}

export type AdapterFit = 'active' | 'free-slot' | 'no-slot';

/**
 * Where adapter A stands at the pod. vLLM runs at most max_lora distinct adapters in one batch:
 * a request for an adapter already running joins the batch; one for another adapter joins only
 * while the batch runs fewer than max_lora adapters, else it waits until one of them drains.
 */
export function adapterFit(view: LoraView, adapter: string): AdapterFit {
  if (view.running.includes(adapter) || view.sentSince.includes(adapter)) return 'active';
  const active = new Set([...view.running, ...view.sentSince]);
  return active.size < view.maxLora ? 'free-slot' : 'no-slot';
}

/** Added TTFT (ms) of running `adapter` at a pod in this state: a slot to wait for, a load unless resident. */
export function adapterCostMs(view: LoraView, adapter: string, costs: LoraCosts): number {
  const fit = adapterFit(view, adapter);
  if (fit === 'active') return 0;
  const load = view.resident.includes(adapter) ? 0 : costs.loadMs;
  return fit === 'free-slot' ? load : load + costs.slotWaitMs;
}
