#!/bin/sh
# Debian's nginx 1.22 lacks the "resolve" parameter of an upstream server (open source
# since 1.27.3, which deploy/nginx.conf is written for): run a copy of the mounted file
# without it.  nginx then resolves "verifier" (every replica's address, from Docker's DNS)
# once at start, which holds as long as the replicas keep their addresses; a replica that
# went away is still skipped by the passive health check (max_fails, proxy_next_upstream).
set -eu
src=/etc/nginx/nginx.conf
conf=/run/nginx-standin.conf
sed -E 's/^([[:space:]]*server[[:space:]].*)[[:space:]]resolve([[:space:]])/\1\2/' "$src" > "$conf"
if [ "$1" = nginx ]; then
    shift
    exec nginx -c "$conf" "$@"
fi
exec "$@"
