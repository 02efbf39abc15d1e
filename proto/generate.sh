#!/usr/bin/env bash
# Regenerates the Go code for proto/spillway/v1/*.proto. Run from anywhere:
#
#   proto/generate.sh
#
# It installs what it needs when missing: protoc from Debian's
# protobuf-compiler package (apt-get, needs root or sudo), and the two Go
# plugins at the pinned versions below (go install, into $(go env GOPATH)/bin).
# The generated *.pb.go files are committed; CI does not run this script.
set -euo pipefail

# Pinned plugin versions. protoc-gen-go must match google.golang.org/protobuf
# in go.mod; protoc-gen-go-grpc is versioned separately from grpc-go.
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2

cd "$(dirname "$0")"

if ! command -v protoc >/dev/null; then
  echo "protoc not found: installing Debian package protobuf-compiler" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  # DPkg::Lock::Timeout waits for another apt process instead of failing.
  $sudo apt-get -o DPkg::Lock::Timeout=300 update
  $sudo apt-get -o DPkg::Lock::Timeout=300 install -y protobuf-compiler
fi

gobin="$(go env GOBIN)"
if [ -z "$gobin" ]; then gobin="$(go env GOPATH)/bin"; fi
export PATH="$gobin:$PATH"

# install_plugin NAME MODULE_PATH VERSION installs NAME unless the one on PATH
# already reports VERSION (with or without the leading "v").
install_plugin() {
  local name=$1 pkg=$2 version=$3 have=""
  if command -v "$name" >/dev/null; then have="$("$name" --version 2>/dev/null || true)"; fi
  case "$have" in
    *" $version" | *" ${version#v}") return 0 ;;
  esac
  echo "installing $name $version (found: ${have:-none})" >&2
  GOBIN="$gobin" go install "$pkg@$version"
}
install_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install_plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"

# third_party holds google/rpc/status.proto for the import only; its Go code
# comes from google.golang.org/genproto/googleapis/rpc/status. The well-known
# types (google/protobuf/*.proto) come with protoc.
protoc \
  -I . -I third_party \
  --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  spillway/v1/controlplane.proto spillway/v1/quota.proto

echo "generated: $(ls spillway/v1/*.pb.go | tr '\n' ' ')" >&2
