# The tools of floe's HTTP API tests (crates/floe-cli/tests/suite/openapi.rs): schemathesis
# (PyPI), the property-based API tester that checks the HTTP API against its OpenAPI
# description, in a venv cached under target/ (a warm run finds it there and installs nothing),
# and curl. Source services.sh first (ensure_package).

# The version tested: a newer one is a change of its own (its checks change).
SCHEMATHESIS_VERSION=4.32.5

# install_openapi_tools: curl (Debian), which the tests point at the gRPC port, and
# schemathesis in target/schemathesis-venv unless it is there at that version; exports
# FLOE_TEST_SCHEMATHESIS, its command, for the tests.
install_openapi_tools() {
  ensure_package curl /usr/bin/curl
  local venv=${CARGO_TARGET_DIR:-target}/schemathesis-venv
  local st=$venv/bin/schemathesis
  if ! [ -x "$st" ] || ! "$venv/bin/python" -m pip show schemathesis 2>/dev/null \
      | grep -qx "Version: $SCHEMATHESIS_VERSION"; then
    # Debian's python3 makes venvs with python3-venv (ensurepip) only.
    python3 -c 'import ensurepip, venv' 2>/dev/null || ensure_package python3-venv /usr/share/doc/python3-venv
    echo "installing schemathesis $SCHEMATHESIS_VERSION (PyPI) in $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      "schemathesis==$SCHEMATHESIS_VERSION" \
      || { sleep 5; "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "schemathesis==$SCHEMATHESIS_VERSION"; }
  fi
  FLOE_TEST_SCHEMATHESIS=$(cd "$(dirname "$st")" && pwd)/schemathesis
  export FLOE_TEST_SCHEMATHESIS
}
