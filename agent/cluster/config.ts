// Discovery's parts of the agent's config file: the static pods (static mode) and the Kubernetes
// settings, with the pods as the pool knows them (agent/config assembles the file).
import { Type, type Static } from '@sinclair/typebox';
import { HostPort, Name } from '../../shared/config-schema.ts';
import type { Pod } from '../types.ts';

const ZmqEndpoint = Type.String({ pattern: '^tcp://[^\\s]+:[0-9]{1,5}$', maxLength: 256 });
const KvEvents = Type.Object(
  {
    endpoint: ZmqEndpoint,
    replayEndpoint: Type.Optional(ZmqEndpoint),
    topic: Type.Optional(Type.String({ maxLength: 256 })),
  },
  { additionalProperties: false },
);

export const StaticPodConfig = Type.Object(
  {
    name: Name,
    namespace: Type.Optional(Name),
    address: HostPort,
    engine: Type.Optional(Type.Union([Type.Literal('vllm'), Type.Literal('tgi'), Type.Literal('sglang')])),
    models: Type.Array(Name, { minItems: 1 }),
    /** Requests the server runs at once (e.g. vLLM --max-num-seqs): caps connections to it. */
    maxConcurrency: Type.Optional(Type.Integer({ minimum: 1 })),
    /** The pod's KV-cache event sockets (vLLM --kv-events-config), for precise prefix routing. */
    kvEvents: Type.Optional(KvEvents),
    /** LoRA adapters the server serves (vLLM --lora-modules): requests may name them as the model. */
    adapters: Type.Optional(Type.Array(Name, { maxItems: 1024 })),
  },
  { additionalProperties: false },
);

export const KubernetesConfig = Type.Object(
  {
    /** Path to a kubeconfig; absent: in-cluster config, else the default kubeconfig. */
    kubeconfig: Type.Optional(Name),
    podIP: Type.Optional(Name),
    agentNamespace: Type.Optional(Name),
    gossipService: Type.Optional(Name),
    providersConfigMap: Type.Optional(Name),
    /** Also discover model-server pods through GIE InferencePools (inference.networking.k8s.io/v1). */
    inferencePools: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

type StaticPodFile = Static<typeof StaticPodConfig>;

/** The static pods as the pool knows them, on this agent's node. */
export function staticPods(pods: readonly StaticPodFile[], node: string): Pod[] {
  return pods.map((p) => {
    const namespace = p.namespace ?? 'default';
    return {
      uid: `${namespace}/${p.name}`,
      name: p.name,
      namespace,
      node,
      address: p.address,
      // An adapter is a model the pod serves: the pool indexes and /v1/models list it too.
      models: [...new Set([...p.models, ...(p.adapters ?? [])])],
      engine: p.engine,
      ...(p.adapters?.length ? { adapters: p.adapters } : {}),
      ...(p.maxConcurrency !== undefined ? { maxConcurrency: p.maxConcurrency } : {}),
      ...(p.kvEvents ? { kvEvents: p.kvEvents } : {}),
    };
  });
}

/** Two static pods with one namespace/name. */
export function staticPodProblems(pods: readonly StaticPodFile[]): string[] {
  const problems: string[] = [];
  const seen = new Set<string>();
  pods.forEach((p, i) => {
    const id = `${p.namespace ?? 'default'}/${p.name}`;
    if (seen.has(id)) problems.push(`pods[${i}].name: duplicate pod "${id}"`);
    seen.add(id);
  });
  return problems;
}
