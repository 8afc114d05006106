// Prometheus text exposition (0.0.4) the way two real exporters write it:
//   - `renderPython`: the Python client (vLLM, SGLang): labels sorted, floats as Go-style repr,
//     counters get `_total`, and optionally a `<name>_created` gauge family per counter/histogram.
//   - `renderRust`: the Rust `metrics-exporter-prometheus` crate (TGI): counters keep their bare
//     name, integers print without ".0", and every family ends with a blank line.

import type { HistogramSnapshot } from './histogram.ts';

export type Labels = Record<string, string>;

interface FamilyBase {
  name: string;
  help: string;
  /** From a custom collector (GC, process): the Python client writes no `_created` for it. */
  noCreated?: boolean;
}

export type Family =
  | (FamilyBase & { type: 'gauge' | 'counter'; series: { labels: Labels; value: number }[] })
  | (FamilyBase & { type: 'histogram'; series: { labels: Labels; hist: HistogramSnapshot }[] });

/** Python's `repr(float)`: shortest round-trip digits, scientific below 1e-4 and from 1e16. */
export function pythonRepr(x: number): string {
  if (Number.isNaN(x)) return 'nan';
  if (!Number.isFinite(x)) return x > 0 ? 'inf' : '-inf';
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  const [mantissa, expText] = x.toExponential().split('e');
  const exp = Number(expText);
  if (exp < -4 || exp >= 16) {
    return `${mantissa}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
  }
  const fixed = String(x); // JS prints this range in fixed notation with the same shortest digits
  return fixed.includes('.') ? fixed : `${fixed}.0`;
}

/** prometheus_client's floatToGoString: Python repr, but exponents from 1e7 up, like Go. */
export function pythonFloat(x: number): string {
  if (x === Infinity) return '+Inf';
  if (x === -Infinity) return '-Inf';
  if (Number.isNaN(x)) return 'NaN';
  const s = pythonRepr(x);
  const dot = s.indexOf('.');
  if (x > 0 && dot > 6) {
    const mantissa = `${s[0]}.${s.slice(1, dot)}${s.slice(dot + 1)}`.replace(/[0.]+$/, '');
    return `${mantissa}e+0${dot - 1}`;
  }
  return s;
}

/** Rust's `Display` for f64: shortest round-trip digits, never an exponent. */
export function rustFloat(x: number): string {
  if (x === Infinity) return 'inf';
  if (x === -Infinity) return '-inf';
  if (Number.isNaN(x)) return 'NaN';
  if (x === 0) return Object.is(x, -0) ? '-0' : '0';
  const [mantissa, expText] = x.toExponential().split('e');
  const exp = Number(expText);
  const sign = mantissa.startsWith('-') ? '-' : '';
  const digits = mantissa.replace(/[-.]/g, '');
  if (exp >= digits.length - 1) return sign + digits + '0'.repeat(exp - digits.length + 1);
  if (exp >= 0) return `${sign}${digits.slice(0, exp + 1)}.${digits.slice(exp + 1)}`;
  return `${sign}0.${'0'.repeat(-exp - 1)}${digits}`;
}

function escapeLabelValue(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

function labelText(pairs: [string, string][]): string {
  if (pairs.length === 0) return '';
  return `{${pairs.map(([k, v]) => `${k}="${escapeLabelValue(v)}"`).join(',')}}`;
}

function sortedPairs(labels: Labels, extra?: [string, string]): [string, string][] {
  const pairs = Object.entries(labels);
  if (extra) pairs.push(extra);
  return pairs.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

function escapeHelp(help: string): string {
  return help.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

/** The Python client's `generate_latest`. `createdAt` (epoch seconds) adds the `_created` families. */
export function renderPython(families: readonly Family[], createdAt?: number): string {
  const out: string[] = [];
  for (const f of families) {
    const exposed = f.type === 'counter' ? `${f.name}_total` : f.name;
    out.push(`# HELP ${exposed} ${escapeHelp(f.help)}`, `# TYPE ${exposed} ${f.type}`);
    const withCreated = createdAt !== undefined && !f.noCreated;
    const created: string[] = [];
    if (f.type === 'histogram') {
      for (const { labels, hist } of f.series) {
        let cumulative = 0;
        hist.bounds.forEach((bound, i) => {
          cumulative += hist.counts[i];
          out.push(
            `${f.name}_bucket${labelText(sortedPairs(labels, ['le', pythonFloat(bound)]))} ${pythonFloat(cumulative)}`,
          );
        });
        cumulative += hist.counts[hist.bounds.length];
        out.push(`${f.name}_bucket${labelText(sortedPairs(labels, ['le', '+Inf']))} ${pythonFloat(cumulative)}`);
        out.push(`${f.name}_count${labelText(sortedPairs(labels))} ${pythonFloat(hist.count)}`);
        out.push(`${f.name}_sum${labelText(sortedPairs(labels))} ${pythonFloat(hist.sum)}`);
        if (withCreated) created.push(`${f.name}_created${labelText(sortedPairs(labels))} ${pythonFloat(createdAt)}`);
      }
    } else {
      for (const { labels, value } of f.series) {
        out.push(`${exposed}${labelText(sortedPairs(labels))} ${pythonFloat(value)}`);
        if (f.type === 'counter' && withCreated) {
          created.push(`${f.name}_created${labelText(sortedPairs(labels))} ${pythonFloat(createdAt)}`);
        }
      }
    }
    if (created.length > 0) {
      out.push(`# HELP ${f.name}_created ${escapeHelp(f.help)}`, `# TYPE ${f.name}_created gauge`, ...created);
    }
  }
  return out.join('\n') + '\n';
}

/** `metrics-exporter-prometheus`: counters, then gauges, then histograms, each family + blank line. */
export function renderRust(families: readonly Family[]): string {
  const order = { counter: 0, gauge: 1, histogram: 2 };
  const sorted = [...families].sort((a, b) => order[a.type] - order[b.type] || (a.name < b.name ? -1 : 1));
  const out: string[] = [];
  for (const f of sorted) {
    out.push(`# HELP ${f.name} ${f.help}`, `# TYPE ${f.name} ${f.type}`);
    if (f.type === 'histogram') {
      for (const { labels, hist } of f.series) {
        const pairs = Object.entries(labels);
        let cumulative = 0;
        hist.bounds.forEach((bound, i) => {
          cumulative += hist.counts[i];
          out.push(`${f.name}_bucket${labelText([...pairs, ['le', rustFloat(bound)]])} ${cumulative}`);
        });
        cumulative += hist.counts[hist.bounds.length];
        out.push(`${f.name}_bucket${labelText([...pairs, ['le', '+Inf']])} ${cumulative}`);
        out.push(`${f.name}_sum${labelText(pairs)} ${rustFloat(hist.sum)}`);
        out.push(`${f.name}_count${labelText(pairs)} ${hist.count}`);
      }
    } else {
      for (const { labels, value } of f.series) {
        const text = f.type === 'counter' ? String(Math.trunc(value)) : rustFloat(value);
        out.push(`${f.name}${labelText(Object.entries(labels))} ${text}`);
      }
    }
    out.push('');
  }
  return out.join('\n') + '\n';
}
