// A pod's calibration summary on the gossip wire (PodEntry field 60), pure: 8 bytes, because a
// round (a digest and a node's 8 pods with their identities) must fit one 1,400-byte datagram
// and that left 92 bytes for 8 pods (test/gossip-wire.test.ts), where float32s would take 36 per pod.
//
//   byte 0: evidence of the free (low 4 bits) and full (high 4 bits) regimes; byte 1: of the
//   queued regime (low 4 bits), and the layout (high 4 bits, 0: this one).
//   bytes 2-7: log margins in 1/32 steps (about 3% of TTFT), signed: free median, free p90,
//   full median, full p90, queued median, queued p90 (calibration-prior.ts says why these two).
//
// Evidence is a 4-bit code for at least 0, 1, 2, 4, ... 200, 256 or 512 observations (read as
// exactly that, so a receiver never counts more evidence than there was). The 90% margin is
// rounded up, so a summary is never narrower than the margin it stands for; margins saturate at
// ±4 (×55).
import { REGIMES, type CalibrationSummary } from '../predict/calibration-prior.ts';

export const CALIBRATION_WIRE_BYTES = 8;
const STEP = 32;
const clampByte = (x: number): number => Math.max(-128, Math.min(127, x));

/** Observations each evidence code stands for; finest where a prior's weight is decided (32-256). */
const EVIDENCE = [0, 1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 200, 256, 512];
const evidenceCode = (n: number): number => {
  let code = 0;
  while (code < 15 && EVIDENCE[code + 1] <= n) code++;
  return code;
};
const evidenceOf = (code: number): number => EVIDENCE[code];

/** The 8 bytes for a summary; undefined when it holds no regime with observations. */
export function encodeCalibration(s: CalibrationSummary | undefined): Uint8Array | undefined {
  if (!s) return undefined;
  const bytes = new Uint8Array(CALIBRATION_WIRE_BYTES);
  const margins = new Int8Array(bytes.buffer, 2, 6);
  let any = false;
  REGIMES.forEach((regime, i) => {
    const r = s[regime];
    const code = r && Number.isFinite(r.median) && Number.isFinite(r.p90) ? evidenceCode(r.observations) : 0;
    if (code === 0) return;
    any = true;
    bytes[i >> 1] |= code << ((i & 1) * 4);
    margins[2 * i] = clampByte(Math.round(r!.median * STEP));
    margins[2 * i + 1] = clampByte(Math.ceil(r!.p90 * STEP));
  });
  return any ? bytes : undefined;
}

/** Why received summary bytes are malformed, if they are. */
export function calibrationProblem(bytes: Uint8Array): string | undefined {
  if (bytes.length !== CALIBRATION_WIRE_BYTES) return `a calibration summary has ${CALIBRATION_WIRE_BYTES} bytes`;
  if (bytes[1] >> 4 !== 0) return 'unknown calibration summary layout';
  return undefined;
}

/** The summary 8 well-formed bytes carry (calibrationProblem first); undefined when they hold none. */
export function decodeCalibration(bytes: Uint8Array): CalibrationSummary | undefined {
  const margins = new Int8Array(bytes.buffer, bytes.byteOffset + 2, 6);
  const out: CalibrationSummary = {};
  let any = false;
  REGIMES.forEach((regime, i) => {
    const code = (bytes[i >> 1] >> ((i & 1) * 4)) & 0xf;
    if (code === 0) return;
    any = true;
    out[regime] = { observations: evidenceOf(code), median: margins[2 * i] / STEP, p90: margins[2 * i + 1] / STEP };
  });
  return any ? out : undefined;
}

/** Whether a new summary is worth a new version: evidence changed its code, or a margin moved 2 steps (6%). */
export function calibrationChanged(a: Uint8Array | undefined, b: Uint8Array | undefined): boolean {
  if (a === b) return false;
  if (!a || !b) return true;
  if (a[0] !== b[0] || a[1] !== b[1]) return true;
  const ma = new Int8Array(a.buffer, a.byteOffset + 2, 6);
  const mb = new Int8Array(b.buffer, b.byteOffset + 2, 6);
  for (let i = 0; i < 6; i++) if (Math.abs(ma[i] - mb[i]) >= 2) return true;
  return false;
}
