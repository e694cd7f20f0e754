# syntax=docker/dockerfile:1
# zapverify, CPU image: verifies on every core through the reference libraries.
#   docker build -t zapverify:cpu -t zapverify:0.1.0-cpu .   # 0.1.0: app/__init__.py __version__
# The CUDA image is Dockerfile.cuda.  Every dependency ships as a wheel; the build stage
# has g++ only to prebuild the CPU backend's native loops (docs/architecture.md, "CPU
# backend"), and no compiler is in the final stage.
ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update && apt-get install -y --no-install-recommends g++ && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY zapverify ./zapverify
RUN python -m venv /opt/zapverify \
 && /opt/zapverify/bin/pip install --only-binary=:all: ".[postgres]" \
 && ZAPVERIFY_KERNEL_CACHE=/tmp/kernels /opt/zapverify/bin/python -c \
    "from app.engine.backends import native; print(native.prebuild('/opt/zapverify/native'))"

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="zapverify" \
      org.opencontainers.image.description="Batch signature verification service (CPU)"
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/zapverify --create-home zapverify \
 && install -d -o zapverify -g zapverify /var/lib/zapverify/data
COPY --from=build /opt/zapverify /opt/zapverify
# The commit this image holds, for --version and GET /v1/info (the image has no .git):
# --build-arg COMMIT=$(git rev-parse HEAD), as scripts/container_test passes.
ARG COMMIT=unknown
ENV ZAPVERIFY_BUILD_COMMIT=${COMMIT} \
    PATH=/opt/zapverify/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    ZAPVERIFY_DATA_DIR=/var/lib/zapverify/data \
    ZAPVERIFY_NATIVE_DIR=/opt/zapverify/native \
    ZAPVERIFY_BACKEND=cpu
USER zapverify
WORKDIR /var/lib/zapverify
# The start-up self-test on the shipped known answers, now: the build fails if a library
# installed here gives a wrong verdict.
RUN zapverify selftest --backend cpu
EXPOSE 8000
# Healthy = ready: the self-test passed (compose puts a replica in rotation on this).
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2).status != 200)"]
CMD ["zapverify", "serve", "--host", "0.0.0.0", "--port", "8000"]
