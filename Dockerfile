# syntax=docker/dockerfile:1
# The Kinference agent image: `docker build -t kinference:0.1.0 .`
# The sources are TypeScript run by Node 24's type stripping, so there is no compile step: the
# build stage only installs production dependencies from the lockfile.

FROM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: no production dependency needs an install script, and none should run here.
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force
COPY bin/ bin/
COPY agent/ agent/
COPY shared/ shared/

# Runtime: Node 24 without a shell or package manager. Files stay owned by root and read-only to
# the agent's user; the DaemonSet also mounts the root filesystem read-only.
FROM gcr.io/distroless/nodejs24-debian12:nonroot
WORKDIR /app
ENV NODE_ENV=production
# package.json carries "type": "module", which bin/kinference.js needs.
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/bin ./bin
COPY --from=build /app/agent ./agent
COPY --from=build /app/shared ./shared
USER 65532:65532
EXPOSE 8080 9090 7946/udp
# `kinference …`; the DaemonSet passes `agent --config /etc/kinference/agent.yaml`.
# A small young generation: at hundreds of requests a second V8 otherwise grows it to its maximum
# and keeps those pages, which was most of the agent's RSS growth under load (npm run soak:
# 121 → 329 MB with the default, 115 → 206 MB with 2 MB, the JS heap back to ~24 MB either way).
ENTRYPOINT ["/nodejs/bin/node", "--max-semi-space-size=2", "/app/bin/kinference.js"]
CMD ["agent", "--config", "/etc/kinference/agent.yaml"]
