// Package inference is the Go code of Triton's GRPCInferenceService (the
// KServe v2 inference protocol with Triton's extensions, ModelStreamInfer
// among them), generated from the published grpc_service.proto and
// model_config.proto of github.com/triton-inference-server/common
// (protobuf/, commit 83adf7cf88a2f343005974dff3728be746de2d66), kept as they
// are, license headers included, in proto/.
//
// Regenerate with `go generate ./loadgen/kserve/inference` (protoc from
// Debian's protobuf-compiler; protoc-gen-go and protoc-gen-go-grpc are tools
// in go.mod). The generated files are committed, so building needs no protoc.
package inference

//go:generate sh gen.sh
