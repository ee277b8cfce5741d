package manifest

import (
	"slices"
	"strings"
)

// EnvAllowed lists the environment keys a manifest records: exact names,
// and prefixes ending in "_" or "*". They are the keys that change what a
// server computes or how fast: devices, thread pools, allocators, the
// engines' own settings. Other keys (PATH, HOME, a shell's) are left out.
var EnvAllowed = []string{
	// devices
	"CUDA_*", "NVIDIA_*", "NV_*", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
	"CUBLAS_*", "CUBLASLT_*", "CUDNN_*", "NCCL_*",
	// thread pools and math libraries
	"OMP_*", "GOMP_*", "KMP_*", "MKL_*", "OPENBLAS_NUM_THREADS", "ONEDNN_*", "DNNL_*",
	"GOMAXPROCS", "GOGC", "GOMEMLIMIT", "GODEBUG",
	"MALLOC_*", "LD_PRELOAD", "LD_LIBRARY_PATH",
	// frameworks and engines
	"PYTORCH_*", "TORCH_*", "TORCHINDUCTOR_*", "VLLM_*", "SGLANG_*", "HF_*",
	"HUGGING_FACE_*", "TRANSFORMERS_*", "TOKENIZERS_PARALLELISM", "LLAMA_*",
	"GGML_*", "OLLAMA_*", "TRT_*", "TRTLLM_*", "TENSORRT_*", "XLA_*",
	"PYTHONHASHSEED",
}

// EnvSecret lists the substrings of a key's name that mark it as a secret:
// a manifest records that such a key is set, never its value.
var EnvSecret = []string{"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH"}

// SecretValue stands for the value of a secret key.
const SecretValue = "(set, value not recorded)"

// EnvKeyAllowed says whether a key is on the allow-list.
func EnvKeyAllowed(key string) bool {
	for _, a := range EnvAllowed {
		if p, ok := strings.CutSuffix(a, "*"); ok {
			if strings.HasPrefix(key, p) {
				return true
			}
		} else if key == a {
			return true
		}
	}
	return false
}

// EnvKeySecret says whether a key looks like it holds a secret.
func EnvKeySecret(key string) bool {
	u := strings.ToUpper(key)
	return slices.ContainsFunc(EnvSecret, func(s string) bool { return strings.Contains(u, s) })
}

// FilterEnv keeps the allowed keys of KEY=VALUE pairs, secrets masked.
func FilterEnv(kvs []string) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		if !EnvKeyAllowed(k) {
			continue
		}
		if EnvKeySecret(k) {
			v = SecretValue
		}
		out[k] = v
	}
	return out
}
