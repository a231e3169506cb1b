#!/usr/bin/env bash
# Regenerate the committed API code from planner/wire/proto (protoc from
# Debian's protobuf-compiler, plugins from the Go module proxy).
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/lib.sh
ensure_go
apt_install protobuf-compiler
bin=$(mktemp -d); trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN=$bin go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
PATH=$bin:$PATH protoc -I planner/wire/proto \
  --go_out=. --go_opt=module=github.com/pinfold/pinfold \
  --connect-go_out=. --connect-go_opt=module=github.com/pinfold/pinfold \
  planner/wire/proto/pinfold/v1/planner.proto
echo "generated planner/wire/pinfoldv1"
