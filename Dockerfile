# The cursor-byok team server: mitmdump + the addon + psycopg, run as an unprivileged user.
# Build: docker build -t cursor-byok .   Run: see compose.yaml and docs/team.md ("Deployment").
FROM python:3.13-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY addon ./addon
COPY store ./store
COPY proto ./proto
COPY prompt ./prompt
RUN pip install '.[team]'
COPY deploy/entrypoint.sh /usr/local/bin/byok-entrypoint

# The CA lives in /data/mitmproxy (a volume: keep it, every replica and client shares it).
# A fixed uid, so the docs can say whom the mounted files must be readable by (chown 10001).
RUN useradd --system --uid 10001 --home-dir /data --create-home byok && mkdir -p /data/mitmproxy && chown -R byok /data
USER byok
VOLUME ["/data"]
EXPOSE 8080
ENTRYPOINT ["byok-entrypoint"]
