// Static discovery: the world as the config file describes it (dev, tests, demo, bare metal).
// The file is watched: policies, namespaces, providers, pods and peers apply without restart.
// A bad new file keeps the old view, says why, and is counted.
import { watch, type FSWatcher } from 'node:fs';
import { loadConfigFile, type AgentSettings } from '../config/load.ts';
import type { ClusterSnapshot, Discovery, DiscoveryStatus } from './types.ts';

export interface StaticDiscoveryOptions {
  settings: AgentSettings;
  /** Watch this file and reload on change (absent: the view never changes). */
  configPath?: string;
  onReload?: (outcome: 'ok' | 'rejected', detail?: string) => void;
  debounceMs?: number;
}

export function snapshotFromSettings(settings: AgentSettings): ClusterSnapshot {
  return {
    pods: settings.pods,
    namespaces: settings.namespaces,
    policies: settings.policies,
    providers: settings.providers,
    peers: settings.peers,
    callers: new Map(),
    peerPods: { kind: 'cidrs', cidrs: settings.peerPodCidrs },
    detectors: settings.detectors,
  };
}

export function createStaticDiscovery(options: StaticDiscoveryOptions): Discovery {
  let snapshot = snapshotFromSettings(options.settings);
  let lastError: string | undefined;
  let watcher: FSWatcher | undefined;
  let timer: NodeJS.Timeout | undefined;
  const listeners: (() => void)[] = [];

  const reload = () => {
    if (!options.configPath) return;
    try {
      const next = loadConfigFile(options.configPath);
      if (next.node !== options.settings.node)
        throw new Error(`node changed from ${options.settings.node} to ${next.node}; restart the agent to change it`);
      snapshot = snapshotFromSettings(next);
      lastError = undefined;
      options.onReload?.('ok');
      for (const listener of listeners) listener();
    } catch (error) {
      lastError = (error as Error).message;
      options.onReload?.('rejected', lastError);
    }
  };

  return {
    async start() {
      if (!options.configPath) return;
      const path = options.configPath;
      // Editors and ConfigMap volumes replace the file (rename), which ends a watch on it:
      // re-arm on every rename so later edits are seen too.
      const arm = (): void => {
        watcher?.close();
        try {
          watcher = watch(path, { persistent: false }, (event) => {
            clearTimeout(timer);
            timer = setTimeout(() => {
              if (event === 'rename') arm();
              reload();
            }, options.debounceMs ?? 100);
          });
          watcher.on('error', () => {});
        } catch {
          // Mid-replace the file may be missing for a moment.
          timer = setTimeout(arm, 200);
        }
      };
      arm();
    },
    snapshot: () => snapshot,
    onChange(listener) {
      listeners.push(listener);
    },
    status(): DiscoveryStatus {
      return { synced: true, connected: true, lastError };
    },
    async stop() {
      clearTimeout(timer);
      watcher?.close();
    },
  };
}
