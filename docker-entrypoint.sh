#!/bin/sh
# The entry point of every service of docker-compose.yml: runs the service's command with
# Spark's authentication on (spark.authenticate), so that Spark's RPC (the master, the
# worker, the driver in Jupyter, the executors) answers only peers that hold the cluster's
# secret, not whoever reaches one of its ports.
#
# The first container to start makes the secret, in the volume that only this project's
# containers mount. Each container then writes spark-conf/spark-defaults.conf and the
# secret into a spark-defaults.conf of its own (0600, in a 0700 folder) and names that
# folder in SPARK_CONF_DIR: Spark's daemons and spark-submit read the secret there, so it
# never stands on a command line, which every process of the container can read.
set -eu
umask 077

shared="${SPARK_AUTH_DIR:-/var/lib/spark-auth}"
project_conf="${PROJECT_SPARK_CONF:-/opt/pyspark-reactive/spark-conf}"
conf="$HOME/.spark-conf"

if [ ! -s "$shared/secret" ]; then
    fresh="$shared/.secret.$$"
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$fresh"
    # Atomic, and refused where another container made one first: that one is kept.
    ln "$fresh" "$shared/secret" 2>/dev/null || true
    rm -f "$fresh"
fi
secret=$(cat "$shared/secret")
if [ -z "$secret" ]; then
    echo "docker-entrypoint.sh: $shared/secret is empty: docker compose down --volumes," \
         "then up again" >&2
    exit 1
fi

mkdir -p "$conf"
chmod 700 "$conf"
# A link: edits of the mounted log4j2.properties apply at the next start of the service.
ln -sf "$project_conf/log4j2.properties" "$conf/log4j2.properties"
{
    cat "$project_conf/spark-defaults.conf"
    # printf is the shell's own: the secret reaches no other program's command line.
    printf '\n# docker-entrypoint.sh: Spark RPC asks every peer for this secret.\n'
    printf 'spark.authenticate true\nspark.authenticate.secret %s\n' "$secret"
} > "$conf/.spark-defaults.conf.$$"
mv "$conf/.spark-defaults.conf.$$" "$conf/spark-defaults.conf"
export SPARK_CONF_DIR="$conf"
exec "$@"
