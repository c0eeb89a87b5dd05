# The optchat compactor worker (`optchat worker`) as an image, for `docker compose up -d` (docker-compose.yml).
# Built from this checkout: only the runtime dependencies are installed (no OpenCode, no test tools), inside the image,
# so it works whatever the host's platform (a host's node_modules may hold another platform's esbuild for tsx).
FROM node:20-bookworm-slim

WORKDIR /app
ENV NODE_ENV=production

# Dependencies first: this layer is rebuilt only when the lock file changes.
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

# What `optchat` runs: the CLI (bin, src), the OpenCode modules it reads OpenCode's storage with (plugin), the schema.
COPY bin ./bin
COPY src ./src
COPY plugin ./plugin
COPY migrations ./migrations
COPY tsconfig.json ./

USER node
# Migrate (idempotent, safe from several processes at once), then run the worker until SIGTERM.
CMD ["sh", "-c", "node bin/optchat.mjs migrate && exec node bin/optchat.mjs worker"]
