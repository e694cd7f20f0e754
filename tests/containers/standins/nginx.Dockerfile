# Stand-in for the official nginx image (nginx:1.28-alpine), for scripts/container_test:
# Debian's nginx (1.22) and wget (compose.yaml's health check uses it).  compose mounts
# deploy/nginx.conf at /etc/nginx/nginx.conf, as for the official image.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends nginx-light wget \
 && rm -rf /var/lib/apt/lists/* /etc/nginx/sites-enabled
COPY nginx-entrypoint.sh /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/nginx-entrypoint.sh"]
CMD ["nginx", "-g", "daemon off;"]
