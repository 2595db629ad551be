#!/usr/bin/env bash
# Builds one container image per Nubes binary from deploy/Dockerfile: the
# binaries are compiled here on the host (static, CGO_ENABLED=0) and copied
# onto BASE_IMAGE, so the image build itself needs no Go toolchain.
#
# usage: scripts/images.sh [--e2e] service...
#   service  a service with a main in services/<name>/cmd/<name> (the
#            Makefile passes its SERVICES list)
#   --e2e    also build the images only the e2e suite uses: ferretdb and nats
#            (pinned versions, see deploy/ferretdb and deploy/nats)
#            and e2e-fixture (the suite's SMTP sink and plugin server)
#            and test-plugin (a gRPC plugin of every kind with reflection,
#            scripted: test/plugin; gRPC on 50051, control on 8080)
#            and registry (an OCI distribution registry: deploy/registry)
#
# env: BASE_IMAGE    gcr.io/distroless/static:nonroot (scratch needs no pull)
#      IMAGE_PREFIX  nubes/      images are $IMAGE_PREFIX<name>:$IMAGE_TAG
#      IMAGE_TAG     dev
#      GOARCH        the host's  (linux/$GOARCH binaries and images)
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_IMAGE=${BASE_IMAGE:-gcr.io/distroless/static:nonroot}
IMAGE_PREFIX=${IMAGE_PREFIX:-nubes/}
IMAGE_TAG=${IMAGE_TAG:-dev}
GOARCH=${GOARCH:-$(go env GOARCH)}
VERSION=$(git describe --always --dirty 2>/dev/null || echo dev)

e2e=false
services=()
for a in "$@"; do
	case $a in
	--e2e) e2e=true ;;
	-*) echo "images.sh: unknown flag $a" >&2; exit 2 ;;
	*) services+=("$a") ;;
	esac
done
if [ ${#services[@]} -eq 0 ]; then
	echo "usage: scripts/images.sh [--e2e] service..." >&2
	exit 2
fi

out=bin/linux_$GOARCH
mkdir -p "$out"
export CGO_ENABLED=0 GOOS=linux GOARCH
flags=(-trimpath -ldflags "-s -w")

start=$SECONDS
pkgs=()
for s in "${services[@]}"; do
	if [ ! -d "services/$s/cmd/$s" ]; then
		echo "images.sh: no service $s (services/$s/cmd/$s)" >&2
		exit 2
	fi
	pkgs+=("./services/$s/cmd/$s")
done
names=("${services[@]}")
echo "compiling ${services[*]} for linux/$GOARCH"
# One go build for every service: the packages compile in parallel.
go build "${flags[@]}" -o "$out/" "${pkgs[@]}"

if $e2e; then
	echo "compiling ferretdb, nats, e2e-fixture, test-plugin, registry for linux/$GOARCH"
	# The pinned upstream servers build from their own modules, outside the
	# workspace, so their dependencies never touch the services' builds.
	(cd deploy/ferretdb && GOWORK=off go build "${flags[@]}" -o "../../$out/ferretdb" .)
	(cd deploy/nats && GOWORK=off go build "${flags[@]}" -o "../../$out/nats" github.com/nats-io/nats-server/v2)
	(cd test/e2e && GOWORK=off go build "${flags[@]}" -o "../../$out/e2e-fixture" ./fixture)
	(cd test/plugin && GOWORK=off go build "${flags[@]}" -o "../../$out/test-plugin" .)
	(cd deploy/registry && GOWORK=off go build "${flags[@]}" -o "../../$out/registry" .)
	names+=(ferretdb nats e2e-fixture test-plugin registry)
fi
echo "compiled in $((SECONDS - start))s"

for n in "${names[@]}"; do
	ctx=bin/images/$n
	rm -rf "$ctx"
	mkdir -p "$ctx/data"
	ln -f "$out/$n" "$ctx/$n" 2>/dev/null || cp "$out/$n" "$ctx/$n"
	image=$IMAGE_PREFIX$n:$IMAGE_TAG
	if ! docker build --quiet -f deploy/Dockerfile \
		--build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg SERVICE="$n" --build-arg VERSION="$VERSION" \
		-t "$image" "$ctx" >/dev/null 2>bin/images/$n.log; then
		cat "bin/images/$n.log" >&2
		echo "images.sh: docker build of $image on $BASE_IMAGE failed; where nothing can be pulled use BASE_IMAGE=scratch" >&2
		exit 1
	fi
	echo "built $image (on $BASE_IMAGE)"
done
echo "images done in $((SECONDS - start))s"
