# The metalflow worker image (deploy/ runs it). Build from the repository root:
#   docker build -t metalflow:0.1.0 .
# Stage 1 builds metalflow's wheel and the wheels of its dependencies; stage 2 installs only
# those wheels into a slim Python, runs as an unprivileged user and starts `python -m worker`.
# tests/test_deploy_image.py builds the same wheel and checks every COPY/RUN here against the
# repository layout (no container engine is needed for that).

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md worker.py ./
COPY contracts/ contracts/
COPY drivers/ drivers/
COPY metalflow/ metalflow/
COPY workflows/ workflows/
COPY activities/ activities/
COPY simulators/ simulators/
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim AS runtime
# A fixed uid/gid so the Deployment's runAsUser/fsGroup (10001) match the files' owner.
RUN groupadd --system --gid 10001 metalflow \
    && useradd --system --uid 10001 --gid metalflow --home-dir /home/metalflow --create-home metalflow
COPY --from=build /wheels /wheels
RUN python -m pip install --no-cache-dir --no-index --find-links /wheels metalflow \
    && rm -rf /wheels
USER 10001:10001
WORKDIR /home/metalflow
ENV PYTHONUNBUFFERED=1 \
    METALFLOW_METRICS_ADDRESS=0.0.0.0:9464
EXPOSE 9464
ENTRYPOINT ["python", "-m", "worker"]
