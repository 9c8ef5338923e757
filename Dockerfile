# syntax=docker/dockerfile:1
# The image `deploy/` runs: `ebb` (controller and agent) with the cluster extras, as a non-root user.
#
#   docker build -t ghcr.io/ebb-dev/ebb:0.1.0 .      # the tag is `version` in pyproject.toml
#
# tests/unit/deploy/test_dockerfile.py checks this file: base pinned by digest, USER not root, the
# install step equal to README.md's, and every image in deploy/*.yaml equal to the tag above.

# Python 3.11 (the oldest `requires-python` allows, as mypy checks) on Debian bookworm, pinned by
# digest so a rebuild gets the same base bytes; bump the tag and digest together, deliberately.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
# a virtualenv, so the runtime stage copies exactly what the install step put there
RUN python -m venv /opt/ebb
ENV PATH=/opt/ebb/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN python -m pip install '.[k8s,etcd]'

FROM ${PYTHON_IMAGE}
# uid/gid 65532 is what the manifests' securityContext runs as (runAsUser/runAsGroup: 65532)
RUN groupadd --system --gid 65532 ebb \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin ebb
COPY --from=build /opt/ebb /opt/ebb
ENV PATH=/opt/ebb/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
LABEL org.opencontainers.image.title="ebb" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
ENTRYPOINT ["ebb"]
CMD ["--help"]
