package transport

import (
	"net/http"
	"testing"
)

func TestWithAPIKey(t *testing.T) {
	t.Setenv(APIKeyEnv, "sk-1")
	given := http.Header{"Authorization": {"Bearer mine"}, "X-Tenant": {"a"}}
	if got := WithAPIKey(given); got.Get("Authorization") != "Bearer mine" {
		t.Errorf("an Authorization given: %q", got)
	}
	if got := WithAPIKey(http.Header{"X-Tenant": {"a"}}); got.Get("Authorization") != "Bearer sk-1" || got.Get("X-Tenant") != "a" {
		t.Errorf("none given: %q", got)
	}
	if got := WithAPIKey(nil); got.Get("Authorization") != "Bearer sk-1" {
		t.Errorf("no headers: %q", got)
	}
	empty := http.Header{"authorization": {""}, "X-Tenant": {"a"}}
	if got := WithAPIKey(empty); len(got) != 1 || got.Get("X-Tenant") != "a" {
		t.Errorf("Authorization= sends none: %q", got)
	}
	h := http.Header{"X-Tenant": {"a"}}
	WithAPIKey(h)
	if len(h) != 1 {
		t.Errorf("the given headers changed: %q", h)
	}
	t.Setenv(APIKeyEnv, "")
	if got := WithAPIKey(h); got.Get("Authorization") != "" {
		t.Errorf("unset: %q", got)
	}
}

func TestBaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8000/": "http://127.0.0.1:8000",
		"127.0.0.1:8000":         "http://127.0.0.1:8000",
		"https://host/v1":        "https://host/v1",
		"HTTP://host:1":          "HTTP://host:1",
		"ftp://host":             "",
		"http://":                "",
		"grpc://host:8001":       "",
	} {
		got, err := BaseURL(in)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("BaseURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
