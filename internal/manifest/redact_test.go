package manifest

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestRedactArgs(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"bpfbench", "run", "--header", "Authorization=Bearer sk-abc", "--header", "X-Tenant=a"},
			[]string{"bpfbench", "run", "--header", "Authorization=" + SecretValue, "--header", "X-Tenant=a"}},
		{[]string{"--header=authorization=Bearer sk-abc", "--header=X-Api-Key=sk-abc", "--header", "Cookie: s=sk-abc"},
			[]string{"--header=authorization=" + SecretValue, "--header=X-Api-Key=" + SecretValue, "--header", "Cookie:" + SecretValue}},
		{[]string{"vllm", "serve", "m", "--api-key", "sk-abc", "--hf-token=sk-abc", "--max-num-batched-tokens", "8192", "--api-key-file", "/etc/key"},
			[]string{"vllm", "serve", "m", "--api-key", SecretValue, "--hf-token=" + SecretValue, "--max-num-batched-tokens", "8192", "--api-key-file", "/etc/key"}},
		{[]string{"--target", "http://me:sk-abc@host:8000", "--target=https://me:sk-abc@host", "HF_TOKEN=sk-abc", "OMP_NUM_THREADS=4"},
			[]string{"--target", "http://me:xxxxx@host:8000", "--target=https://me:xxxxx@host", "HF_TOKEN=" + SecretValue, "OMP_NUM_THREADS=4"}},
		{[]string{"--port", "8000", "--api-key"}, []string{"--port", "8000", "--api-key"}},
	} {
		if got := RedactArgs(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("RedactArgs(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
	}
	if RedactArgs(nil) != nil {
		t.Error("RedactArgs(nil) is not nil")
	}
}

// The manifest records neither a header's secret from bpfbench's own
// arguments nor the server's --api-key.
func TestCollectRedactsArgs(t *testing.T) {
	m, _ := Collect(os.Getpid(), Options{Args: []string{"bpfbench", "run", "--header", "Authorization=Bearer sk-verysecret"}})
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "sk-verysecret") || !slices.Contains(m.Bpfbench.Args, "Authorization="+SecretValue) {
		t.Errorf("the manifest's args: %q", m.Bpfbench.Args)
	}
}
