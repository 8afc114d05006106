// The agent's layering, checked in CI (`npm run lint:deps`): the pure core that decides imports no
// shell that talks to the world; shells reach one another through the core's types and their own
// front files, not through each other's internals; nothing imports in a loop.
const CORE = '^agent/(classify|policy|predict|route|prefix|budget|admission)/';
const SHELLS = 'server|forward|telemetry|gossip|cluster|providers|cli|config|memory|pool';

/** @type {import('dependency-cruiser').IConfiguration} */
export default {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'An import loop makes its modules one unit: none of them can be read, tested or moved alone.',
      from: {},
      to: { circular: true },
    },
    {
      name: 'core-imports-no-shell',
      severity: 'error',
      comment:
        'The core decides on plain data, with time and randomness passed in; sockets, timers, files and ' +
        'settings belong to the shells, which hand the core what it needs.',
      from: { path: CORE },
      to: { path: `^agent/(${SHELLS})/|^agent/agent\\.ts$` },
    },
    {
      name: 'shells-import-no-request-path',
      severity: 'error',
      comment:
        'The request path (server), the commands (cli) and the wiring (agent.ts) sit on top: the shells ' +
        'below them (forward, providers, telemetry, gossip, cluster, config, pool, memory) reach them ' +
        'only through the core types in agent/types.ts and interfaces of their own.',
      from: { path: '^agent/(forward|providers|telemetry|gossip|cluster|config|pool|memory)/' },
      to: { path: '^agent/(server|cli)/|^agent/agent\\.ts$' },
    },
    {
      name: 'agent-imports-no-bench-or-test',
      severity: 'error',
      comment: 'What ships never depends on benchmarks, tests or scripts.',
      from: { path: '^(agent|shared)/' },
      to: { path: '^(bench|test|scripts)/' },
    },
    {
      name: 'no-orphans',
      severity: 'error',
      comment: 'A module nothing imports and that is not an entry point is dead code (knip checks exports too).',
      from: {
        orphan: true,
        pathNot: [
          '\\.d\\.ts$',
          '(^|/)\\.[^/]+\\.js$',
          '^eslint\\.config\\.js$',
          '^bin/',
          '^test/',
          '^scripts/',
          '^bench/',
          '^agent/cli/main\\.ts$',
          '^agent/policy/render-crd\\.ts$',
        ],
      },
      to: {},
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
  },
};
