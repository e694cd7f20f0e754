# Stand-in for the official Python image (python:3.12-slim-bookworm), for scripts/container_test
# on machines that reach only the Debian and PyPI registries: Debian's python3 with venv
# and pip on a debootstrap base.  The build context (made by the script) carries this
# machine's extra CA certificates and pip settings; they go into this stand-in only, never
# into the product's Dockerfiles, which take it as PYTHON_IMAGE.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
ENV LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive
COPY ca-certificates/ /usr/local/share/ca-certificates/
COPY pip.conf /etc/pip.conf
# ca-certificates' postinst runs update-ca-certificates, which adds the local ones;
# python-is-python3: the official image answers to `python` too.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 python3-venv python-is-python3 \
 && rm -rf /var/lib/apt/lists/*
CMD ["python3"]
