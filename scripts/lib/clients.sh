# The example clients in other languages (examples/clients/), run against a real floe serve by
# crates/floe-cli/tests/suite/clients.rs. Source after services.sh (ensure_package), from the
# repository's root; install_clients exports FLOE_TEST_CLIENT_PYTHON, _NODE and _GO.

# install_clients: Python (Debian's python3, grpcio and grpcio-tools from PyPI in a venv under
# target/), Node.js (Debian's node and npm, the example's locked packages by npm ci) and Go
# (Debian's go, protoc and its Go plugins, and Debian's gRPC and protobuf sources: built offline).
install_clients() {
  ensure_package python3-venv /usr/share/doc/python3-venv/copyright
  local venv=target/clients/python-venv
  local requirements=examples/clients/python/requirements.txt
  # Installed again when requirements.txt changes (its copy in the venv says what is there).
  if ! cmp -s "$requirements" "$venv/requirements.txt"; then
    echo "installing the Python client's packages (PyPI)"
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" \
      || { sleep 5; "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"; }
    cp "$requirements" "$venv/requirements.txt"
  fi
  export FLOE_TEST_CLIENT_PYTHON=$PWD/$venv/bin/python

  ensure_package nodejs /usr/bin/node
  ensure_package npm /usr/bin/npm
  (cd examples/clients/node && npm ci --no-audit --no-fund --loglevel=error)
  export FLOE_TEST_CLIENT_NODE=/usr/bin/node

  ensure_package golang-go /usr/bin/go
  ensure_package protobuf-compiler /usr/bin/protoc
  # The APIv2 shim of github.com/golang/protobuf first: gRPC's package also accepts the older
  # 1.3 one, which cannot marshal protoc-gen-go's APIv2 messages.
  ensure_package golang-github-golang-protobuf-1-5-dev \
    /usr/share/doc/golang-github-golang-protobuf-1-5-dev/copyright
  ensure_package golang-google-protobuf-dev /usr/share/gocode/src/google.golang.org/protobuf/go.mod
  ensure_package golang-google-grpc-dev /usr/share/gocode/src/google.golang.org/grpc/version.go
  # protoc-gen-go of google.golang.org/protobuf (not protoc-gen-go-1-3's, the same path).
  ensure_package protoc-gen-go /usr/share/doc/protoc-gen-go/copyright
  ensure_package protoc-gen-go-grpc /usr/bin/protoc-gen-go-grpc
  export FLOE_TEST_CLIENT_GO=/usr/bin/go
}
