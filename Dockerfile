# syntax=docker/dockerfile:1
# Two images from one file:
#   docker build --target operator -t eo-operator:0.1.0 .   kopf operator: no Spark, no JVM
#   docker build --target job      -t eo-job:0.1.0 .        Spark driver and executor image:
#                                                           PySpark, JRE 17, Spark's Kafka
#                                                           connector jars
# Compilers, Maven and pip caches live only in the builder stages; the final stages copy a
# finished virtualenv (and, for the job, the jar cache) and run as uid 10001, for whom only
# /tmp is writable (HOME too points there): pods run them with a read-only root filesystem
# and an emptyDir on /tmp. The job image also runs as any UID without a passwd entry
# (OpenShift's restricted SCC): its entrypoint gives that UID a name through libnss-wrapper.
# One base image for every stage, pinned to an exact tag (the venv's interpreter comes from
# the base image, so builder and final stages must use the same one). Where no registry is
# reachable, scripts/build-images.sh passes --build-arg BASE_IMAGE=<a local Debian base with
# the same release and Python minor version>, built with debootstrap.
ARG BASE_IMAGE=python:3.11.14-slim-bookworm

FROM ${BASE_IMAGE} AS builder
# pip trusts the system CA store, not only its own bundle.
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PYTHONDONTWRITEBYTECODE=1
# A build machine behind a TLS-intercepting proxy mounts its CA certificates at /run/build-ca
# (scripts/build-images.sh does, with buildah's --volume); they are trusted in the builder
# stages only, never copied into a final image. Without the mount this changes nothing.
RUN if [ -d /run/build-ca ]; then cp /run/build-ca/*.crt /usr/local/share/ca-certificates/; fi \
    && update-ca-certificates \
    && apt-get update \
    && apt-get install --yes --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
# Dependencies go into the virtualenv, from pyproject.toml, before eo's own source is copied;
# eo itself goes into /opt/eo/app (on the venv's path through a .pth file). So a code change
# reuses the dependency layers, here and in the final stages, whose copy of the venv (1 GB
# for the job: PySpark alone is ~450 MB) stays the same layer.
RUN python -m venv /opt/eo/venv \
    && site="$(/opt/eo/venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
    && echo /opt/eo/app >"$site/eo-app.pth"
WORKDIR /src
COPY pyproject.toml docker/requirements.py ./

# The operator's dependencies only: the spec models, the commit protocol, kopf, kubernetes.
FROM builder AS operator-build
RUN --mount=type=cache,target=/root/.cache/pip \
    python requirements.py pyproject.toml operator >/tmp/requirements.txt \
    && /opt/eo/venv/bin/pip install --requirement /tmp/requirements.txt
COPY README.md ./
COPY jobs/ jobs/
COPY operator/ operator/
RUN --mount=type=cache,target=/root/.cache/pip \
    /opt/eo/venv/bin/pip install --no-deps --target /opt/eo/app "/src[operator]"

# The driver's dependencies (PySpark), then the Kafka connector jars that PySpark does not
# ship, resolved from Maven Central by the same script developers use. fetch-jars.sh reads
# the PySpark version from <checkout>/.venv, so /src/.venv points at the image's venv.
FROM builder AS job-build
RUN apt-get update \
    && apt-get install --yes --no-install-recommends maven \
    && rm -rf /var/lib/apt/lists/*
RUN --mount=type=cache,target=/root/.cache/pip \
    python requirements.py pyproject.toml spark >/tmp/requirements.txt \
    && /opt/eo/venv/bin/pip install --requirement /tmp/requirements.txt
COPY scripts/fetch-jars.sh scripts/
COPY scripts/lib/progress.sh scripts/lib/
COPY tools/jars/ tools/jars/
ENV EO_CACHE=/opt/eo/cache
RUN --mount=type=cache,target=/root/.m2 \
    ln -s /opt/eo/venv /src/.venv \
    && scripts/fetch-jars.sh \
    && rm -rf "$EO_CACHE"/jars/kafka-broker-* \
    && ls -d "$EO_CACHE"/jars/spark-kafka-*/
# eo's JVM writer (the Maven module jvm/writer: PostgreSQL's binary COPY and MySQL's/MariaDB's
# XA writer tasks), built by Maven with the Eclipse compiler on the build stage's Java runtime,
# against PySpark's jars and the JDBC drivers fetch-jars.sh resolved (pgJDBC, MariaDB
# Connector/J: LGPL-2.1, its unmodified jar ships beside eo-writer.jar; docs/mysql.md).
COPY scripts/build-writer.sh scripts/
COPY jvm/ jvm/
RUN --mount=type=cache,target=/root/.m2 \
    scripts/build-writer.sh /opt/eo/writer
COPY README.md ./
COPY jobs/ jobs/
COPY operator/ operator/
RUN --mount=type=cache,target=/root/.cache/pip \
    /opt/eo/venv/bin/pip install --no-deps --target /opt/eo/app "/src[spark]"

FROM ${BASE_IMAGE} AS job
RUN apt-get update \
    && apt-get install --yes --no-install-recommends openjdk-17-jre-headless tini libnss-wrapper \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f /usr/bin/java)")")" /opt/java \
    && groupadd --system --gid 10001 eo \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp \
       --shell /usr/sbin/nologin eo \
    && chmod 0755 /var/tmp /run/lock
COPY --from=job-build /opt/eo/venv /opt/eo/venv
COPY --from=job-build /opt/eo/cache /opt/eo/cache
COPY --from=job-build /opt/eo/writer /opt/eo/writer
COPY docker/entrypoint.sh /opt/eo/bin/entrypoint
COPY --from=job-build /opt/eo/app /opt/eo/app
ENV PATH=/opt/eo/app/bin:/opt/eo/venv/bin:$PATH \
    JAVA_HOME=/opt/java \
    EO_CACHE=/opt/eo/cache \
    EO_WRITER_JARS=/opt/eo/writer \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
WORKDIR /tmp
USER 10001:10001
EXPOSE 9108
# The image is also Spark's executor image: `executor` starts Spark's executor backend (the
# argument Spark gives executor pods), anything else runs `eo` (docker/entrypoint.sh).
# tini forwards signals and reaps the executors' orphaned Python workers, as PID 1 or, with
# -s, as a child subreaper where it is not PID 1 (a pod sharing its process namespace).
ENTRYPOINT ["/usr/bin/tini", "-s", "--", "/opt/eo/bin/entrypoint"]
CMD ["run"]

FROM ${BASE_IMAGE} AS operator
RUN groupadd --system --gid 10001 eo \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp \
       --shell /usr/sbin/nologin eo \
    && chmod 0755 /var/tmp /run/lock
COPY --from=operator-build /opt/eo/venv /opt/eo/venv
COPY --from=operator-build /opt/eo/app /opt/eo/app
ENV PATH=/opt/eo/app/bin:/opt/eo/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
WORKDIR /tmp
USER 10001:10001
EXPOSE 8080 9090
ENTRYPOINT ["eo"]
CMD ["operator"]
