# The one image of every service in docker-compose.yml: pyspark (whose own bin/spark-class
# runs the standalone master and worker), this package and JupyterLab. The driver in
# Jupyter and the executors' Python workers thus run the same interpreter at the same path
# (local_session() tells Spark to use sys.executable) with the same packages.
FROM python:3.11-slim-bookworm

# Spark 4 needs Java 17 or 21; procps gives Spark's scripts `ps`.
RUN apt-get update \
    && apt-get install --yes --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

# The newest pyspark line the project's tests run on, within pyproject.toml's range
# (tests/test_docker_compose.py checks both).
ARG PYSPARK_VERSION=4.3.0

WORKDIR /opt/pyspark-reactive
COPY pyproject.toml README.md LICENSE ./
COPY spark-conf/ spark-conf/
COPY src/ src/
# Editable, so local_session() reads ./spark-conf, which docker-compose.yml mounts from the
# repository over the copy above.
RUN pip install --no-cache-dir "pyspark==${PYSPARK_VERSION}" --editable ".[spark,notebooks]" \
        "jupyterlab>=4,<5"

# Every service starts through it: Spark's authentication on, with the cluster's secret
# in a private spark-defaults.conf (beside spark-conf/'s settings) that SPARK_CONF_DIR
# names for the master, the worker and spark-submit.
COPY docker-entrypoint.sh /usr/local/bin/

# Nothing needs root at run time; the worker's work dir and Jupyter's state go to /tmp and
# the user's home. The folder of the secret's volume (docker-compose.yml) is made here,
# the user's and 0700, so that a new volume starts so.
RUN useradd --create-home --uid 1000 spark \
    && install --directory --owner=spark --group=spark --mode=0700 /var/lib/spark-auth
USER spark
ENTRYPOINT ["docker-entrypoint.sh"]
