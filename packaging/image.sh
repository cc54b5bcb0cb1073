#!/usr/bin/env bash
# floe's container image with buildah and no base image: a root filesystem made of the floe
# binary, the shared libraries it links (as ldd lists them, from this machine, the one it was
# built on), a passwd and group naming user floe (10001), the CA bundle, and the state
# directory, configured as the Containerfile's runtime stage is (user, ENV, ports, volume,
# health check, entrypoint: crates/floe-cli/tests/suite/image.rs checks they agree). For
# machines that cannot pull debian:bookworm-slim, or that want no distribution in the image.
#
#   packaging/image.sh [FLOE_BINARY [IMAGE]]
#
# FLOE_BINARY: default target/release/floe (`cargo build --release --locked -p floe-cli`);
# IMAGE: default localhost/floe:latest. Prints the image ID. Storage: buildah's own settings
# (root: /var/lib/containers); BUILDAH_OPTS adds global options, e.g.
# "--storage-driver vfs --root DIR --runroot DIR". Run it with podman:
#   podman run --rm -p 34904:34904 -p 34903:34903 -v floe-state:/var/lib/floe localhost/floe
# (the Containerfile's header says more).
set -euo pipefail

binary=${1:-target/release/floe}
image=${2:-localhost/floe:latest}
# shellcheck disable=SC2206 # options, split on purpose
opts=(${BUILDAH_OPTS:-})
b() { buildah "${opts[@]}" "$@"; }

[[ -x $binary ]] || { echo "image.sh: no floe binary at $binary" >&2; exit 2; }
commit=$("$binary" --version | sed -n 's/.*(commit \(.*\))$/\1/p')
version=$("$binary" --version | awk '{print $2}')

# Docker's format throughout: OCI's has no HEALTHCHECK.
export BUILDAH_FORMAT=docker
ctr=$(b from scratch)
trap 'b rm "$ctr" >/dev/null' EXIT
root=$(b mount "$ctr")

install -D -m 0755 "$binary" "$root/usr/local/bin/floe"
# The libraries and the dynamic loader, at the paths the binary asks for.
for lib in $(ldd "$binary" | grep -o '/[^ ]*'); do
  install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
done
install -d -m 0755 "$root/etc"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nfloe:x:10001:10001:floe:/var/lib/floe:/usr/sbin/nologin\n' \
  > "$root/etc/passwd"
printf 'root:x:0:\nfloe:x:10001:\n' > "$root/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$root/etc/nsswitch.conf"
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
fi
install -d -m 1777 "$root/tmp"
install -d -o 10001 -g 10001 -m 0750 "$root/var/lib/floe"
b umount "$ctr" >/dev/null

b config \
  --label org.opencontainers.image.title=floe \
  --label "org.opencontainers.image.description=Distributed unique IDs: Snowflake, sno, LexicalUUID, UUIDv7, ULID and per-key sequences" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  --label "org.opencontainers.image.revision=$commit" \
  --label "org.opencontainers.image.version=$version" \
  --env FLOE_GRPC=0.0.0.0:34904 \
  --env FLOE_HTTP=0.0.0.0:34903 \
  --env FLOE_STATE_DIR=/var/lib/floe \
  --volume /var/lib/floe \
  --workingdir /var/lib/floe \
  --user 10001:10001 \
  --port 34904/tcp --port 34903/tcp \
  --healthcheck 'CMD /usr/local/bin/floe gen uuid7 --server 127.0.0.1:34904' \
  --healthcheck-interval 30s --healthcheck-timeout 5s --healthcheck-start-period 10s \
  --healthcheck-retries 3 \
  --stop-signal SIGTERM \
  --entrypoint '["/usr/local/bin/floe", "serve"]' \
  --cmd '[]' \
  "$ctr"
b commit --quiet --format docker "$ctr" "$image"
