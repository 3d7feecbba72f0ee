# adapter_critic's standalone server as a container image.
#
#   docker build -t adapter-critic .                      # from the official Python image, packages from PyPI
#   deploy/build-image.sh --offline                       # no registry reachable: a Debian base made here, and
#                                                         # the packages from a wheelhouse built on this machine
#   docker run -p 8000:8000 adapter-critic                # the demo; see docs/guides/deployment.md
#
# Configured by environment: ADAPTER_CRITIC_CONFIG (the config file, mounted in), ADAPTER_CRITIC_STORE (the run
# store's URL, e.g. postgresql://user:pass@db/runs; without it runs go to a SQLite file under the /data volume),
# UVICORN_WORKERS (worker processes), UVICORN_HOST / UVICORN_PORT (where it listens; the health check follows),
# UVICORN_TIMEOUT_GRACEFUL_SHUTDOWN (how long in-flight requests may run on after SIGTERM). Any other uvicorn
# option is UVICORN_<OPTION>.
#
# BASE must provide `python3` with the `venv` module (the official python:3.11-slim does; so does a Debian
# bookworm with python3-venv). Both stages use it, so the virtual environment's interpreter is the runtime's.
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
# An offline build's wheelhouse (deploy/build-image.sh --offline fills it): the dependencies, pinned in
# requirements.txt, and the build backend. Empty otherwise, and then the packages come from the index.
COPY deploy/wheelhouse/ /wheels/
# The dependencies first, in a layer of their own: a change to the source does not reinstall them.
RUN python3 -m venv /opt/adapter_critic \
 && if [ -f /wheels/requirements.txt ]; then \
      /opt/adapter_critic/bin/pip install --no-index --find-links /wheels --requirement /wheels/requirements.txt; \
    fi
COPY pyproject.toml README.md LICENSE /src/
COPY src/ /src/src/
RUN if [ -f /wheels/requirements.txt ]; then offline="--no-index --find-links /wheels"; else offline=""; fi \
 && /opt/adapter_critic/bin/pip install $offline "/src[server,postgres]" \
 && /opt/adapter_critic/bin/pip uninstall --yes pip setuptools
COPY deploy/healthcheck.py /opt/adapter_critic/healthcheck.py

FROM ${BASE}
# No compiler, no pip cache, no build backend: the virtual environment alone, owned by root, run by a user that
# owns nothing but the data volume.
RUN groupadd --gid 10001 adapter_critic \
 && useradd --uid 10001 --gid 10001 --home-dir /data --create-home --shell /usr/sbin/nologin adapter_critic
COPY --from=build /opt/adapter_critic /opt/adapter_critic
ENV PATH=/opt/adapter_critic/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    XDG_DATA_HOME=/data \
    UVICORN_HOST=0.0.0.0 \
    UVICORN_PORT=8000 \
    UVICORN_WORKERS=1 \
    UVICORN_TIMEOUT_GRACEFUL_SHUTDOWN=30
# The run store's SQLite file (when no ADAPTER_CRITIC_STORE or store.url says otherwise): /data/adapter_critic/.
VOLUME ["/data"]
WORKDIR /data
USER adapter_critic
EXPOSE 8000
# `docker stop` sends SIGTERM: uvicorn stops accepting, lets the requests in flight finish (up to
# UVICORN_TIMEOUT_GRACEFUL_SHUTDOWN seconds), then the app drains its run store and exits. Give `docker stop -t` /
# compose's stop_grace_period a few seconds more than that.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python3", "/opt/adapter_critic/healthcheck.py"]
CMD ["uvicorn", "adapter_critic.asgi:app"]
