#!/bin/sh
# One-shot (docker-compose.yml `temporal-register`): wait for the Temporal frontend, create the
# namespace if missing and register tempoconf's search attributes: four Keyword ones and the
# KeywordList TempoconfPaths (an upsert of an unregistered attribute would make the rollout's
# workflow tasks retry forever; the worker upserts TempoconfPaths only where it finds it
# registered). Safe to run again: it registers only what is missing.
# The `temporal` CLI reads TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE and the TLS / API key variables.
set -eu
: "${TEMPORAL_ADDRESS:?TEMPORAL_ADDRESS (host:port of the Temporal frontend) is required}"
namespace="${TEMPORAL_NAMESPACE:-default}"
attempts=60
until temporal operator cluster health >/dev/null 2>&1; do
    attempts=$((attempts - 1))
    if [ "$attempts" -le 0 ]; then
        echo "temporal-register: Temporal at $TEMPORAL_ADDRESS is not serving after 2 minutes" >&2
        temporal operator cluster health
        exit 1
    fi
    sleep 2
done
if ! temporal operator namespace describe --namespace "$namespace" >/dev/null 2>&1; then
    temporal operator namespace create --namespace "$namespace" --retention 30d
fi
# A namespace just created can take a moment to show in every frontend's cache: retry briefly.
registered=""
for _ in $(seq 1 30); do
    registered="$(temporal operator search-attribute list --namespace "$namespace" 2>/dev/null)" && break
    sleep 1
done
for attribute in TempoconfPath=Keyword TempoconfVersion=Keyword TempoconfStage=Keyword \
    TempoconfState=Keyword TempoconfPaths=KeywordList; do
    name="${attribute%%=*}"
    # -w: TempoconfPath is not found in TempoconfPaths
    if ! printf '%s\n' "$registered" | grep -qw "$name"; then
        temporal operator search-attribute create --namespace "$namespace" --name "$name" \
            --type "${attribute#*=}"
    fi
done
echo "temporal-register: namespace $namespace with search attributes TempoconfPath, TempoconfVersion, TempoconfStage, TempoconfState, TempoconfPaths"
