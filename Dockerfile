# syntax=docker/dockerfile:1
# Two images from one file:
#   docker build --target operator -t eo-operator:0.1.0 .   kopf operator: no Spark, no JVM
#   docker build --target job      -t eo-job:0.1.0 .        Spark driver: PySpark, JRE 17,
#                                                           Spark's Kafka connector jars
# Compilers, Maven and pip caches live only in the builder stages; the final stages copy a
# finished virtualenv (and, for the job, the jar cache) and run as uid 10001.
# Base images are pinned to exact tags; bump them together (the venv's interpreter comes
# from the base image, so builder and final stages must use the same one).

FROM python:3.11.14-slim-bookworm AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN apt-get update \
    && apt-get install --yes --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/eo/venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY jobs/ jobs/
COPY operator/ operator/

# The operator's dependencies only: the spec models, the commit protocol, kopf, kubernetes.
FROM builder AS operator-build
RUN --mount=type=cache,target=/root/.cache/pip \
    /opt/eo/venv/bin/pip install "/src[operator]"

# The driver's dependencies (PySpark), then the Kafka connector jars that PySpark does not
# ship, resolved from Maven Central by the same script developers use. fetch-jars.sh reads
# the PySpark version from <checkout>/.venv, so /src/.venv points at the image's venv.
FROM builder AS job-build
RUN apt-get update \
    && apt-get install --yes --no-install-recommends maven \
    && rm -rf /var/lib/apt/lists/*
RUN --mount=type=cache,target=/root/.cache/pip \
    /opt/eo/venv/bin/pip install "/src[spark]"
COPY scripts/fetch-jars.sh scripts/
COPY tools/jars/ tools/jars/
ENV EO_CACHE=/opt/eo/cache
RUN --mount=type=cache,target=/root/.m2 \
    ln -s /opt/eo/venv /src/.venv \
    && scripts/fetch-jars.sh \
    && rm -rf "$EO_CACHE"/jars/kafka-broker-* \
    && ls -d "$EO_CACHE"/jars/spark-kafka-*/

FROM python:3.11.14-slim-bookworm AS job
RUN apt-get update \
    && apt-get install --yes --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f /usr/bin/java)")")" /opt/java \
    && groupadd --system --gid 10001 eo \
    && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/eo \
       --shell /usr/sbin/nologin eo
COPY --from=job-build /opt/eo/venv /opt/eo/venv
COPY --from=job-build /opt/eo/cache /opt/eo/cache
ENV PATH=/opt/eo/venv/bin:$PATH \
    JAVA_HOME=/opt/java \
    EO_CACHE=/opt/eo/cache \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /home/eo
USER 10001:10001
EXPOSE 9108
ENTRYPOINT ["eo"]
CMD ["run"]

FROM python:3.11.14-slim-bookworm AS operator
RUN groupadd --system --gid 10001 eo \
    && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/eo \
       --shell /usr/sbin/nologin eo
COPY --from=operator-build /opt/eo/venv /opt/eo/venv
ENV PATH=/opt/eo/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /home/eo
USER 10001:10001
EXPOSE 8080 9090
ENTRYPOINT ["eo"]
CMD ["operator"]
