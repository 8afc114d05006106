// `kinference <command>`: one entry point for every program the project ships.
const USAGE = `usage: kinference <command> [options]

commands:
  agent --config FILE            run an agent
  demo [--duration S]            agent + simulated GPU pods + simulated provider under a peak
  sim --port P [--engine vllm|tgi|sglang] [--max-seqs N] [--speed X]
                                 run one simulated model server
  policy check [--agent-namespace NS] FILE...
                                 validate InferencePolicy YAML (exit 1 on errors)
  explain --admin URL --model M [--tenant T] [--tags a,b] [--prompt-tokens N]
                                 ask a running agent what it would do with such a request now
  explain --admin URL --body FILE [--api chat|completions|embeddings] [--ip A] [--header 'N: V']...
                                 the same for a real body: where each detector fired, in which decoded form
`;

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case 'agent':
      return (await import('./agent.ts')).runAgentCommand(rest);
    case 'demo':
      return (await import('./demo.ts')).runDemoCommand(rest);
    case 'sim':
      await (await import('./sim.ts')).runSimCommand(rest);
      return 0;
    case 'policy':
      if (rest[0] !== 'check' || rest.length < 2) break;
      return (await import('./policy-check.ts')).runPolicyCheck(rest.slice(1));
    case 'explain':
      return (await import('./explain.ts')).runExplainCommand(rest);
    case '--help':
    case '-h':
    case 'help':
      process.stdout.write(USAGE);
      return 0;
  }
  process.stderr.write(USAGE);
  return 2;
}

if (import.meta.main) {
  // Exit explicitly: a command is over when main resolves, whatever keep-alive sockets linger.
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error: unknown) => {
      console.error(`kinference: ${(error as Error).stack ?? error}`);
      process.exit(1);
    },
  );
}
