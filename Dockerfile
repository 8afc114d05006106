# syntax=docker/dockerfile:1
# The Kinference agent image: `docker build -t kinference:0.1.0 .`
# The sources are TypeScript. The npm package (bin/kinference.js) and the tests run them through
# Node's type stripping; the image runs them compiled (`npm run build` → dist/), because the type stripper
# (a WebAssembly compiler and its source) costs ~29 MB of resident memory for the process's life.

# Compile: the dev dependencies (TypeScript) stay in this stage.
FROM node:24-slim AS compile
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: no dependency needs an install script here, and none should run. It leaves the
# pinned `node` dev dependency (for local scripts) uninstalled: its link goes, this image's Node 24
# runs the build.
RUN npm ci --ignore-scripts --no-audit --no-fund && rm -f node_modules/.bin/node
COPY tsconfig.json tsconfig.build.json ./
COPY agent/ agent/
COPY shared/ shared/
RUN npm run build

# Production dependencies only.
FROM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force

# Runtime: Node 24 without a shell or package manager. Files stay owned by root and read-only to
# the agent's user; the DaemonSet also mounts the root filesystem read-only.
FROM gcr.io/distroless/nodejs24-debian12:nonroot
WORKDIR /app
ENV NODE_ENV=production
# glibc malloc (kept equal to bench/process-memory.ts IMAGE_ENV by test/manifests.test.ts): buffers
# ≥ 1 MiB (large request bodies) in their own mappings, returned when freed, instead of glibc
# raising its threshold to the largest buffer seen and then fragmenting the main heap with them
# (npm run soak: +27 MB kept after the 3 MB bodies without it). Two arenas: V8's and libuv's worker
# threads share them instead of keeping one each, which kept 5–10 MB of freed memory after the soak's
# 1,000 streams (with it the soak ended 108–110 MB in 3 of 3 runs, without 111–120 in 4).
ENV MALLOC_MMAP_THRESHOLD_=1048576 MALLOC_ARENA_MAX=2
# package.json carries "type": "module", which the compiled modules need.
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=compile /app/dist ./dist
USER 65532:65532
EXPOSE 8080 9090 7946/udp
# `kinference …`; the DaemonSet passes `agent --config /etc/kinference/agent.yaml`.
# Node flags (kept equal to bench/process-memory.ts IMAGE_NODE_FLAGS by test/manifests.test.ts, so
# `npm run soak` and `npm run bench:memory` measure the agent as deployed; figures in docs/benchmarks.md, "Memory"):
# --max-semi-space-size=16: the young generation V8 gives a 64-bit host with memory to spare,
#   fixed so that a container's memory limit does not shrink it: with 2 MB the agent spent ~16 %
#   of its main thread in scavenges at saturation and reached 0.34x nginx's throughput, with 16 MB
#   0.49x; it costs RSS after a hostile burst (the soak), not under the lines of bench:memory.
# No --memory-saver-mode: it makes every major GC a memory-reducing one and, measured, roughly
#   doubles the CPU per request at saturation; the agent's own idle release (a memory-reducing GC
#   once quiet) gives the pages back after a burst instead (docs/decisions/0004-image-memory-flags.md).
ENTRYPOINT ["/nodejs/bin/node", "--max-semi-space-size=16", "/app/dist/agent/cli/main.js"]
CMD ["agent", "--config", "/etc/kinference/agent.yaml"]
