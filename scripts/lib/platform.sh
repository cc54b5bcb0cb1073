# Platform tools and checks for scripts/test.sh (sourced after services.sh, which gives
# ensure_package): the install path of the README, and the tools that check deploy/kubernetes.

# install_platform_tools: for crates/floe-cli/tests/suite/image.rs, buildah, podman, runc and
# CNI's plugins (Debian; runc rather than crun: crun refuses a host with cgroups in hybrid mode)
# and strip (binutils) for the binary it puts in the image. For
# crates/floe-cli/tests/suite/kubernetes.rs, Debian's kubectl (package kubernetes-client, 1.20:
# its built-in kustomize renders deploy/kubernetes) unpacked under target/platform-tools rather
# than installed, so that the suite renders with exactly that one whatever kubectl a machine
# has, and kubernetes-validate (PyPI: Kubernetes' JSON schemas, bundled, offline) in a venv
# there; both kept between runs, named by FLOE_TEST_KUBECTL and FLOE_TEST_KUBERNETES_VALIDATE.
install_platform_tools() {
  local dir=$PWD/target/platform-tools
  mkdir -p "$dir"
  ensure_package binutils /usr/bin/strip
  ensure_package runc /usr/sbin/runc
  ensure_package containernetworking-plugins /usr/lib/cni/portmap
  ensure_package buildah /usr/bin/buildah
  ensure_package podman /usr/bin/podman
  if [[ ! -x $dir/kubectl/usr/bin/kubectl ]]; then
    echo "fetching kubernetes-client (Debian) into $dir"
    apt-get update -qq || true
    rm -rf "$dir/deb" "$dir/kubectl"
    mkdir -p "$dir/deb"
    (cd "$dir/deb" && apt-get download kubernetes-client 2>/dev/null) \
      || (sleep 5 && cd "$dir/deb" && apt-get download kubernetes-client)
    dpkg-deb -x "$dir"/deb/kubernetes-client_*.deb "$dir/kubectl"
    rm -rf "$dir/deb"
  fi
  if [[ ! -x $dir/venv/bin/kubernetes-validate ]]; then
    echo "installing kubernetes-validate (PyPI) into $dir/venv"
    ensure_package python3-venv /usr/share/doc/python3-venv
    rm -rf "$dir/venv"
    /usr/bin/python3 -m venv "$dir/venv"
    "$dir/venv/bin/pip" install --quiet --disable-pip-version-check kubernetes-validate==1.37.0
  fi
  export FLOE_TEST_KUBECTL=$dir/kubectl/usr/bin/kubectl
  export FLOE_TEST_KUBERNETES_VALIDATE=$dir/venv/bin/kubernetes-validate
}

# check_install: the README's install, `cargo install --path crates/floe-cli --locked`, into a
# throw-away root (not CARGO_HOME's bin), then the installed binary on the PATH: --version and
# a UUIDv7 it generates and reads back. With --debug and the suite's target directory, run after
# the tests, so that it reuses the suite's build rather than compiling a cold release build (minutes: docs/deploy.md,
# Install); the command is otherwise the documented one.
check_install() {
  local root status=0
  root=$(mktemp -d)
  install_into "$root" || status=$?
  rm -rf "$root"
  return "$status"
}

# install_into ROOT: check_install's install and checks, into ROOT.
install_into() {
  local root=$1 version floe id
  version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
  cargo install --debug --locked --quiet --path crates/floe-cli --root "$root" \
    --target-dir "$PWD/target"
  floe=$(PATH="$root/bin:$PATH" command -v floe)
  if [[ $floe != "$root/bin/floe" ]]; then
    echo "check_install: floe on the PATH is ${floe:-nothing}, not $root/bin/floe" >&2
    return 1
  fi
  if ! "$floe" --version | grep -q "^floe $version (commit "; then
    echo "check_install: floe --version says $("$floe" --version), not floe $version" >&2
    return 1
  fi
  id=$(cd "$root" && "$floe" gen uuid7)
  if [[ ! $id =~ ^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$ ]]; then
    echo "check_install: floe gen uuid7 printed $id" >&2
    return 1
  fi
  (cd "$root" && "$floe" inspect "$id" | grep -q uuid) || {
    echo "check_install: floe inspect $id does not read it back" >&2
    return 1
  }
  echo "installed and ran $floe: $("$floe" --version), $id"
}
