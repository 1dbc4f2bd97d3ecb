#!/bin/sh
# The team server's start command (Dockerfile): mitmdump with the cursor-byok addon, configured from
# environment variables and the files mounted at /etc/byok (docs/team.md, "Deployment").
set -eu
: "${BYOK_DB:?set BYOK_DB to the postgresql:// URL of the store}"
etc="${BYOK_ETC:-/etc/byok}"
# A file copied in with `chmod 600` belongs to a host user: this container's user (uid 10001) cannot
# read it, and the proxy would start without models or users. Say so now, and how to fix it.
for f in providers.toml htpasswd team.toml; do
  if [ -e "$etc/$f" ] && [ ! -r "$etc/$f" ]; then
    echo "cursor-byok: cannot read $etc/$f as $(id -un) (uid $(id -u)); on the host: chmod 644 team/$f," \
      "or sudo chown $(id -u) team/$f (docs/team.md, Deployment)" >&2
    exit 1
  fi
done
set -- mitmdump -s /app/addon/cursor_byok.py \
  --listen-host "${BYOK_LISTEN_HOST:-0.0.0.0}" --listen-port "${BYOK_LISTEN_PORT:-8080}" \
  --set confdir=/data/mitmproxy \
  --set byok_db="$BYOK_DB" \
  --set byok_config="$etc/providers.toml" \
  --set proxyauth="@$etc/htpasswd" \
  --set byok_replica="${BYOK_REPLICA:-}" \
  "$@"
if [ -f "$etc/team.toml" ]; then
  set -- "$@" --set byok_team="$etc/team.toml"
fi
exec "$@"
