// `kinference policy check FILE...`: validate InferencePolicy YAML before it reaches a cluster.
//
// A file may hold, as YAML documents separated by `---`:
//   - InferencePolicy objects (apiVersion and kind required, as kubectl wants them);
//   - a `List` / `InferencePolicyList` of them (what `kubectl get -o yaml` prints);
//   - an agent config file (no kind, a `policies:` list and optional `namespaces:` annotations);
//   - Namespace objects, whose kinference.io/* annotations are checked and taken into account
//     (a namespace that pins one of two tied policies resolves the tie).
// Any other document is an error rather than skipped: a misspelt kind must not pass as "ok".
// All policies of all files form one set, checked for duplicates and ambiguous ties.
import { readFile } from 'node:fs/promises';
import { LineCounter, parseAllDocuments, type Document } from 'yaml';
import { API_VERSION, KIND, type InferencePolicy } from '../policy/schema.ts';
import { describeDoc, validatePolicy, type PolicyError } from '../policy/validate.ts';
import { formatPath, isRecord } from '../../shared/json.ts';
import { checkNamespaceAnnotations } from '../policy/annotations.ts';
import { checkPolicySet } from '../policy/resolve.ts';

export interface CheckOutput {
  log(line: string): void;
  error(line: string): void;
}

interface NamespaceSource {
  annotations: Record<string, string>;
  /** Message prefix and the path of the annotations, e.g. `metadata.annotations`. */
  where: string;
  at: (string | number)[];
  doc: Document;
  lines: LineCounter;
}

interface Found {
  policy: InferencePolicy;
  /** `file: doc N` or `file: doc N items[M]`, for messages. */
  where: string;
  /** Where the policy sits inside its document, to find lines. */
  at: (string | number)[];
  doc: Document;
  lines: LineCounter;
}

/** The manifests' namespace: where the agent runs unless told otherwise. */
const DEFAULT_AGENT_NAMESPACE = 'kinference';

/**
 * Returns the exit code: 0 all valid (warnings allowed), 1 any error, 2 usage.
 * `--agent-namespace NAME` (default kinference): policies there are cluster-wide, as the agent
 * reads them in Kubernetes, so their guardrails set the floor the others are checked against.
 */
export async function runPolicyCheck(args: string[], out: CheckOutput = console): Promise<number> {
  const flag = args.indexOf('--agent-namespace');
  const agentNamespace = flag === -1 ? DEFAULT_AGENT_NAMESPACE : args[flag + 1];
  const files = flag === -1 ? args : args.filter((_, i) => i !== flag && i !== flag + 1);
  if (files.length === 0 || !agentNamespace) {
    out.error('usage: kinference policy check [--agent-namespace NAME] FILE...');
    return 2;
  }
  let errors = 0;
  const found: Found[] = [];
  const namespaces = new Map<string, NamespaceSource>();
  const report = (line: string) => {
    errors++;
    out.error(line);
  };

  for (const file of files) {
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch (err) {
      report(`${file}: cannot read: ${(err as Error).message}`);
      continue;
    }
    const lines = new LineCounter();
    const docs = parseAllDocuments(text, { lineCounter: lines, prettyErrors: false });
    if (!Array.isArray(docs)) {
      report(`${file}: no InferencePolicy documents`);
      continue;
    }
    let policiesInFile = 0;
    const errorsBefore = errors;
    docs.forEach((doc, i) => {
      policiesInFile += readDocument(doc, `${file}: doc ${i + 1}`, lines, { report, found, namespaces });
    });
    if (policiesInFile === 0 && errors === errorsBefore) report(`${file}: no InferencePolicy or Namespace documents`);
  }

  const clusterWide = (p: InferencePolicy) =>
    p.metadata.namespace === agentNamespace ? { ...p, metadata: { ...p.metadata, namespace: '*' } } : p;
  const policies = found.map((f) => clusterWide(f.policy));
  const annotations = new Map([...namespaces].map(([ns, source]) => [ns, source.annotations]));
  for (const issue of checkNamespaceAnnotations(policies, annotations)) {
    const source = namespaces.get(issue.namespace);
    if (!source) continue;
    const at = [...source.at, issue.key];
    report(`${source.where}: ${formatPath(at)}: ${issue.message}${nodeLine(source.doc, source.lines, at)}`);
  }
  let warnings = 0;
  for (const issue of checkPolicySet(policies, annotations)) {
    const f = found[issue.index];
    const segments = issue.path.split('.');
    const other = issue.other !== undefined ? ` [other: ${found[issue.other].where}]` : '';
    const line = `${f.where} (${describeDoc(f.policy)}): ${issue.path}: ${issue.severity === 'warning' ? 'warning: ' : ''}${issue.message}${other}${nodeLine(f.doc, f.lines, [...f.at, ...segments])}`;
    if (issue.severity === 'error') report(line);
    else {
      warnings++;
      out.log(line);
    }
  }

  if (errors > 0) {
    out.error(`${errors} error${errors === 1 ? '' : 's'}`);
    return 1;
  }
  out.log(
    `ok: ${policies.length} ${policies.length === 1 ? 'policy' : 'policies'}${warnings > 0 ? `, ${warnings} warning${warnings === 1 ? '' : 's'}` : ''}`,
  );
  return 0;
}

/** Where one file's documents put what they hold, and how they report what is wrong. */
interface DocumentSink {
  report(line: string): void;
  found: Found[];
  namespaces: Map<string, NamespaceSource>;
}

/** One YAML document: its policies (alone, in a List, or in an agent config) and namespace annotations. Returns how many it held. */
function readDocument(doc: Document.Parsed, where: string, lines: LineCounter, sink: DocumentSink): number {
  const { report, found, namespaces } = sink;
  let counted = 0;
  if (doc.errors.length > 0) {
    for (const e of doc.errors)
      report(`${where}: invalid YAML: ${e.message.split('\n')[0]}${lineSuffix(lines, e.pos[0])}`);
    return 0;
  }
  const value: unknown = doc.toJS();
  if (value === null || value === undefined) return 0; // an empty document (trailing ---)

  const check = (item: unknown, label: string, at: (string | number)[], requireTypeMeta: boolean) => {
    counted++;
    const result = validatePolicy(item, { requireTypeMeta });
    const name = describeDoc(item);
    const prefix = `${label}${name ? ` (${name})` : ''}`;
    if (result.ok) {
      found.push({ policy: result.policy, where: label, at, doc, lines });
      return;
    }
    for (const e of result.errors) report(`${prefix}: ${formatError(e, at, doc, lines)}`);
  };

  if (!isRecord(value)) {
    report(
      `${where}: expected an InferencePolicy object, found ${Array.isArray(value) ? 'a list' : JSON.stringify(value)}`,
    );
  } else if (value.kind === KIND || (value.kind === undefined && value.apiVersion === API_VERSION)) {
    check(value, where, [], true);
  } else if ((value.kind === 'List' || value.kind === `${KIND}List`) && Array.isArray(value.items)) {
    value.items.forEach((item, m) => check(item, `${where} items[${m}]`, ['items', m], true));
  } else if (value.kind === undefined && Array.isArray(value.policies)) {
    value.policies.forEach((item, m) => check(item, `${where} policies[${m}]`, ['policies', m], false));
    if (value.namespaces !== undefined) {
      if (!isAnnotationMap(value.namespaces))
        report(
          `${where}: namespaces: expected namespace: {annotation: "value", …}${nodeLine(doc, lines, ['namespaces'])}`,
        );
      else {
        for (const [ns, annotations] of Object.entries(value.namespaces)) {
          namespaces.set(ns, { annotations, where, at: ['namespaces', ns], doc, lines });
        }
      }
    }
  } else if (value.kind === 'Namespace' && isRecord(value.metadata) && typeof value.metadata.name === 'string') {
    counted++;
    const annotations = value.metadata.annotations ?? {};
    if (!isRecord(annotations) || !Object.values(annotations).every((v) => typeof v === 'string')) {
      report(
        `${where} (namespace ${value.metadata.name}): metadata.annotations: expected string values${nodeLine(doc, lines, ['metadata', 'annotations'])}`,
      );
    } else {
      namespaces.set(value.metadata.name, {
        annotations: annotations as Record<string, string>,
        where: `${where} (namespace ${value.metadata.name})`,
        at: ['metadata', 'annotations'],
        doc,
        lines,
      });
    }
  } else {
    report(
      `${where}: kind: expected ${KIND} (or a List of them), found ${value.kind === undefined ? 'nothing' : JSON.stringify(value.kind)}${nodeLine(doc, lines, ['kind'])}`,
    );
  }
  return counted;
}

function isAnnotationMap(value: unknown): value is Record<string, Record<string, string>> {
  return (
    isRecord(value) &&
    Object.values(value).every((a) => isRecord(a) && Object.values(a).every((v) => typeof v === 'string'))
  );
}

function formatError(e: PolicyError, base: (string | number)[], doc: Document, lines: LineCounter): string {
  const path = formatPath(e.at);
  return `${path ? `${path}: ` : ''}${e.message}${nodeLine(doc, lines, [...base, ...e.at])}`;
}

/** ` (line N)` of the deepest node on the path that exists (a missing field: its parent). */
function nodeLine(doc: Document, lines: LineCounter, at: (string | number)[]): string {
  for (let n = at.length; n >= 0; n--) {
    const node = doc.getIn(at.slice(0, n), true) as { range?: [number, number, number] } | undefined;
    if (node?.range) return lineSuffix(lines, node.range[0]);
  }
  return '';
}

function lineSuffix(lines: LineCounter, offset: number): string {
  return ` (line ${lines.linePos(offset).line})`;
}

if (import.meta.main) process.exitCode = await runPolicyCheck(process.argv.slice(2));
