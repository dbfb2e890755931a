# syntax=docker/dockerfile:1
# The podtailor image the manifests name (ghcr.io/podtailor/podtailor): both commands,
# podtailor-recommender and podtailor-updater, in one virtualenv. Multi-stage: the build stage compiles
# the wheel and its dependencies; the runtime stage holds only the virtualenv and runs as UID 65532.
#   docker build -t ghcr.io/podtailor/podtailor:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/podtailor
COPY pyproject.toml README.md ./
COPY podtailor ./podtailor
COPY recommender ./recommender
COPY updater ./updater
# Byte-compiled here: the root filesystem is read-only at run time.
RUN /opt/podtailor/bin/pip install --no-compile . \
 && /opt/podtailor/bin/podtailor-recommender --version \
 && /opt/podtailor/bin/podtailor-updater --version \
 && /opt/podtailor/bin/python -m compileall -q -j 0 /opt/podtailor

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="podtailor" \
      org.opencontainers.image.description="Kubernetes right-sizing: Prometheus-driven recommender and in-place resize updater" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/podtailor/podtailor"
COPY --from=build /opt/podtailor /opt/podtailor
ENV PATH=/opt/podtailor/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# Numeric UID and GID so that runAsNonRoot can be verified by the kubelet; no shell login, no home.
USER 65532:65532
EXPOSE 8942 8943 8443 8944
ENTRYPOINT []
CMD ["podtailor-recommender", "--help"]
