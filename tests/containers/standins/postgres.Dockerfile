# Stand-in for the official PostgreSQL image (postgres:17-alpine), for scripts/container_test:
# Debian's PostgreSQL 15 with an entry point that honours the same environment
# (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB) and data directory
# (/var/lib/postgresql/data), and pg_isready for compose.yaml's health check.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive PGDATA=/var/lib/postgresql/data
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o postgres -g postgres "$PGDATA" /run/postgresql
ENV PATH=/usr/lib/postgresql/15/bin:$PATH
COPY postgres-entrypoint.sh /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
EXPOSE 5432
STOPSIGNAL SIGINT
CMD ["postgres"]
