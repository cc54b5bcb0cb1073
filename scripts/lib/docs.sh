# The tools the docs' examples use (crates/floe-cli/tests/suite/docs_examples.rs runs every
# example of README.md and docs/*.md): curl against the server, openssl to make a scramble key.
# Source after services.sh (ensure_package).

ensure_docs_tools() {
  ensure_package curl /usr/bin/curl
  ensure_package openssl /usr/bin/openssl
}
