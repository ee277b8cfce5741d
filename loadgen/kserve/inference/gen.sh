#!/bin/sh
# Generates the Go code of proto/*.proto with Debian's protoc and the
# protoc-gen-go and protoc-gen-go-grpc tools of go.mod (go generate runs it).
set -eu
pkg=github.com/bpfbench/bpfbench/loadgen/kserve/inference
m="Mgrpc_service.proto=$pkg,Mmodel_config.proto=$pkg"
protoc -I proto \
	--plugin=protoc-gen-go="$(go tool -n protoc-gen-go)" \
	--plugin=protoc-gen-go-grpc="$(go tool -n protoc-gen-go-grpc)" \
	--go_out=. --go_opt=paths=source_relative,"$m" \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative,"$m" \
	grpc_service.proto model_config.proto
