// Gateway API Inference Extension's InferencePool (inference.networking.k8s.io/v1) as a source of
// model-server pods. Pure: the informer hands in the pools it holds; this says which pods belong
// to one, on which port they serve, and which models. A pool selects pods by labels in its own
// namespace and names one target port; GIE's pool names no model (requests carry it), so the
// models come from the pool's `kinference.io/model` annotation and the pods' own.
import { ENGINE_ANNOTATION, MODEL_ANNOTATION } from './kubernetes-snapshot.ts';
import type { KubeObject, PoolMembership, PoolMembers } from './kubernetes-snapshot.ts';

export const INFERENCE_POOLS_PATH = '/apis/inference.networking.k8s.io/v1/inferencepools';

export interface InferencePoolObject extends KubeObject {
  spec?: {
    selector?: { matchLabels?: Record<string, string> };
    targetPorts?: { number?: number }[];
  };
}

interface UsablePool extends PoolMembership {
  namespace: string;
  matchLabels: [string, string][];
}

function splitList(value: string | undefined): string[] {
  return (value ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

/**
 * The pools that can select anything: a selector with at least one label (an empty one would take
 * every pod in the namespace, which GIE does not mean) and a port in 1–65535. Others are skipped.
 */
function usablePools(pools: readonly InferencePoolObject[]): UsablePool[] {
  const out: UsablePool[] = [];
  for (const p of pools) {
    const matchLabels = Object.entries(p.spec?.selector?.matchLabels ?? {});
    const port = p.spec?.targetPorts?.[0]?.number;
    if (matchLabels.length === 0 || !Number.isInteger(port) || port! < 1 || port! > 65535) continue;
    const namespace = p.metadata?.namespace ?? 'default';
    const annotations = p.metadata?.annotations ?? {};
    const engine = annotations[ENGINE_ANNOTATION]?.trim();
    out.push({
      pool: `${namespace}/${p.metadata?.name ?? ''}`,
      namespace,
      matchLabels,
      port: port!,
      models: splitList(annotations[MODEL_ANNOTATION]),
      ...(engine ? { engine } : {}),
    });
  }
  return out.sort((a, b) => a.pool.localeCompare(b.pool));
}

/** Membership lookup over `pools`; undefined when there are none to look at. */
export function poolMembers(pools: readonly InferencePoolObject[]): PoolMembers | undefined {
  const usable = usablePools(pools);
  if (usable.length === 0) return undefined;
  const byNamespace = Map.groupBy(usable, (p) => p.namespace);
  return (pod) => {
    const labels = pod.metadata?.labels ?? {};
    const candidates = byNamespace.get(pod.metadata?.namespace ?? 'default') ?? [];
    const match = candidates.find((p) => p.matchLabels.every(([k, v]) => labels[k] === v));
    if (!match) return undefined;
    const { pool, port, models, engine } = match;
    return { pool, port, models, ...(engine ? { engine } : {}) };
  };
}
