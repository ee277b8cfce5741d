package sweep

import (
	"testing"
)

func TestParseSLOs(t *testing.T) {
	s, err := ParseSLOs("p99_ttft_ms<=200, p99_itl_ms<50,request_goodput>=1")
	if err != nil || len(s) != 3 || s[0].Op != "<=" || s[1].Op != "<" || s[1].Value != 50 || s[2].Op != ">=" {
		t.Fatalf("%+v %v", s, err)
	}
	if !s[0].Met(200) || s[1].Met(50) {
		t.Error("Met")
	}
	for _, bad := range []string{"", "p99_ttft_ms=3", "p99_ttft_ms<=x"} {
		if _, err := ParseSLOs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
