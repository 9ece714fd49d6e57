#!/bin/sh
# Replace the running tempoconf containers with the image `docker compose build` just made,
# keeping the counts they run at (docs/how-to/upgrades.md).
#
# The API first, without a moment when clients get no answer: compose recreates a service's
# replicas all at once, and until the new ones pass their healthcheck the proxy would have none
# to send a request to. So as many replicas of the new image start beside the old ones, and only
# once they are healthy are the old ones stopped (SIGTERM: each finishes its requests in flight);
# the proxy tries another replica for a request that one of them drops. Then the
# rest (the worker) is recreated: rollouts wait for it on Temporal and lose nothing. New replicas
# that are not healthy in time (a build that does not start) are removed again and the upgrade
# stops there, exit 1, with the end of one's log: the running version serves on, untouched.
#
# Run it from the directory of docker-compose.yml, after `docker compose run --rm migrate`, with
# the same environment as every other compose command (COMPOSE_FILE and the like pass through).
set -eu

# Seconds the new API replicas have to pass their healthcheck before the upgrade gives up.
healthy_within=${TEMPOCONF_UPGRADE_WAIT:-180}

running() {
    docker compose ps --quiet --status running "$1" | wc -l | tr -d ' '
}

api=$(running api)
workers=$(running worker)
# The API's image as the compose files name it (`config --images` would add its dependencies').
image=$(docker compose config api \
    | awk '/^  api:$/ {found = 1; next} found && /^  [^ ]/ {exit} found && /^    image: / {print $2; exit}')
if ! latest=$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null); then
    echo "upgrade: there is no image $image: run \`docker compose build\` first" >&2
    exit 1
fi

# The API replicas running an image other than the one just built.
outdated=""
for container in $(docker compose ps --quiet api); do
    if [ "$(docker inspect --format '{{.Image}}' "$container")" != "$latest" ]; then
        outdated="$outdated $container"
    fi
done

if [ -n "$outdated" ]; then
    echo "upgrade: starting $api API replica(s) of $image beside the running ones" >&2
    before=$(docker compose ps --quiet --all api | tr '\n' ' ')
    if ! docker compose up --detach --wait --wait-timeout "$healthy_within" --no-deps \
        --no-recreate --scale "api=$((api + api))" api; then
        # A build that does not serve: the new replicas go, the old ones never stopped serving.
        started=""
        for container in $(docker compose ps --quiet --all api); do
            case " $before " in
                *" $container "*) ;;
                *) started="$started $container" ;;
            esac
        done
        first=$(echo "$started" | awk '{print $1}')
        if [ -n "$first" ]; then
            echo "upgrade: the end of a new replica's log:" >&2
            docker logs --tail 15 "$first" >&2 2>&1 || true
            # shellcheck disable=SC2086 # a list of container ids
            docker rm --force $started >/dev/null
        fi
        echo "upgrade: the API replicas of $image did not become healthy within" \
            "${healthy_within} s: removed them; the $api running before serve on, and nothing" \
            "else was replaced" >&2
        exit 1
    fi
    echo "upgrade: stopping the API replicas of the previous image" >&2
    # shellcheck disable=SC2086 # a list of container ids
    docker stop $outdated >/dev/null
    # shellcheck disable=SC2086
    docker rm $outdated >/dev/null
fi

# Everything else whose image or configuration changed, at the counts it runs at (none running:
# the compose file's).
scale=""
[ "$api" -gt 0 ] && scale="$scale --scale api=$api"
[ "$workers" -gt 0 ] && scale="$scale --scale worker=$workers"
# shellcheck disable=SC2086 # $scale is a list of options
docker compose up --detach --wait $scale
echo "upgrade: done; API replicas: $(running api), workers: $(running worker)"
