package transport

import "testing"

func TestRedacted(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8000":                "http://127.0.0.1:8000",
		"https://user:s3cret@host:8443/v1":     "https://user:xxxxx@host:8443/v1",
		"https://token@host":                   "https://token@host",
		"127.0.0.1:8001":                       "127.0.0.1:8001",
		"grpc://svc:p%40ss@triton.local:8001/": "grpc://svc:xxxxx@triton.local:8001/",
	} {
		if got := Redacted(in); got != want {
			t.Errorf("Redacted(%q) = %q, want %q", in, got, want)
		}
	}
}
