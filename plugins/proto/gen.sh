#!/bin/sh
# Regenerates the Go code of detector.proto. Needs protoc (apt: protobuf-compiler) and
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.6
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.3.0
set -eu
cd "$(dirname "$0")"
PATH="$(go env GOPATH)/bin:$PATH"
protoc --proto_path=. \
	--go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative \
	detector.proto
