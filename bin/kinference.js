#!/usr/bin/env node
// The package's command. The sources are TypeScript run through Node's type stripping (Node ≥ 22.19).
import { main } from '../agent/cli/main.ts';

process.exit(await main(process.argv.slice(2)));
