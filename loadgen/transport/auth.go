package transport

import (
	"net/http"
	"os"
	"strings"
)

// APIKeyEnv is the environment variable OpenAI's clients take their key
// from. The OpenAI-compatible protocol sends it as "Authorization: Bearer
// KEY" (vLLM's --api-key, SGLang's, llama.cpp's --api-key check that
// header); KServe's gRPC protocol has no such convention, and gets none.
const APIKeyEnv = "OPENAI_API_KEY"

// WithAPIKey returns the headers an OpenAI-compatible request is sent
// with: h with "Authorization: Bearer $OPENAI_API_KEY" added when the
// variable is set and h has no Authorization header of its own; an empty
// one in h (--header Authorization=) sends none. h itself is never
// changed: the key lives only in the copy the client sends, so that
// nothing which records the configuration (a result, a manifest, a log
// line) holds it.
func WithAPIKey(h http.Header) http.Header {
	given, empty := false, true
	for k, vs := range h {
		if http.CanonicalHeaderKey(k) != "Authorization" {
			continue
		}
		given = true
		for _, v := range vs {
			empty = empty && strings.TrimSpace(v) == ""
		}
	}
	if given {
		if !empty {
			return h
		}
		out := make(http.Header, len(h))
		for k, vs := range h {
			if http.CanonicalHeaderKey(k) != "Authorization" {
				out[k] = vs
			}
		}
		return out
	}
	key := strings.TrimSpace(os.Getenv(APIKeyEnv))
	if key == "" {
		return h
	}
	out := h.Clone()
	if out == nil {
		out = http.Header{}
	}
	out.Set("Authorization", "Bearer "+key)
	return out
}
