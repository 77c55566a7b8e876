#!/bin/bash
# Entrypoint of the projections image (ops/Dockerfile, target `projections`).
#
#   <image> list | run NAME ... | ...   `outbox-projections` with these arguments (the default: `list`)
#   <image> executor                    a Spark executor, as Spark on Kubernetes starts one: it runs the image with
#                                       the single argument `executor` and passes everything else in SPARK_*
#                                       variables (the driver's URL, the executor's id, cores and memory, its pod)
#   <image> driver ...                  the driver of an application submitted in cluster mode, as Spark on
#                                       Kubernetes starts it (`driver --properties-file ... <app> <args>`)
#   <image> spark-submit ...            any other command, as it is (the Helm chart's projection Jobs)
#
# An image of the project's own instead of Spark's: the executors must run the same Python, wheel and jars as the
# driver. The executor's command line follows the one in Apache Spark's Kubernetes image (Apache License 2.0).
set -euo pipefail

case "${1:-list}" in
  executor)
    shift
    # Spark hands the executor's JVM options over as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ... in order.
    java_opts=()
    while IFS= read -r option; do
      java_opts+=("$option")
    done < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | cut -d= -f2-)
    classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$SPARK_HOME/jars/*"
    if [ -n "${SPARK_EXTRA_CLASSPATH:-}" ]; then
      classpath="$classpath:$SPARK_EXTRA_CLASSPATH"
    fi
    exec java "${java_opts[@]}" -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" -cp "$classpath" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID" --podName "$SPARK_EXECUTOR_POD_NAME"
    ;;
  driver)
    shift
    exec spark-submit --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS" --deploy-mode client "$@"
    ;;
  spark-submit | spark-class | python | python3 | bash | sh)
    exec "$@"
    ;;
  *)
    exec outbox-projections "$@"
    ;;
esac
