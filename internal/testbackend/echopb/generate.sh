#!/usr/bin/env bash
# Regenerates echo.pb.go and echo_grpc.pb.go from echo.proto. Run from
# anywhere:
#
#   internal/testbackend/echopb/generate.sh
#
# It needs protoc, protoc-gen-go and protoc-gen-go-grpc at the versions
# pinned in proto/generate.sh; running that script first installs any that
# are missing. The generated files are committed; CI does not run this.
set -euo pipefail

# protoc runs from the repository root so that the file registers as
# internal/testbackend/echopb/echo.proto, a name no other package uses.
cd "$(dirname "$0")/../../.."

gobin="$(go env GOBIN)"
if [ -z "$gobin" ]; then gobin="$(go env GOPATH)/bin"; fi
export PATH="$gobin:$PATH"

for tool in protoc protoc-gen-go protoc-gen-go-grpc; do
  if ! command -v "$tool" >/dev/null; then
    echo "$tool not found: run proto/generate.sh once to install it" >&2
    exit 1
  fi
done

protoc \
  -I . \
  --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  internal/testbackend/echopb/echo.proto

echo "generated: $(ls internal/testbackend/echopb/*.pb.go | tr '\n' ' ')" >&2
