#!/bin/sh
# The team server's start command (Dockerfile): mitmdump with the cursor-byok addon, configured from
# environment variables and the files mounted at /etc/byok (docs/team.md, "Deployment").
set -eu
: "${BYOK_DB:?set BYOK_DB to the postgresql:// URL of the store}"
set -- mitmdump -s /app/addon/cursor_byok.py \
  --listen-host "${BYOK_LISTEN_HOST:-0.0.0.0}" --listen-port "${BYOK_LISTEN_PORT:-8080}" \
  --set confdir=/data/mitmproxy \
  --set byok_db="$BYOK_DB" \
  --set byok_config=/etc/byok/providers.toml \
  --set proxyauth=@/etc/byok/htpasswd \
  --set byok_replica="${BYOK_REPLICA:-}" \
  "$@"
if [ -f /etc/byok/team.toml ]; then
  set -- "$@" --set byok_team=/etc/byok/team.toml
fi
exec "$@"
