package bpfutil

import "testing"

func comm(s string) (b [16]int8) {
	for i := range min(len(s), 15) {
		b[i] = int8(s[i])
	}
	return b
}

// A kernel's task name is read up to its NUL; a name seen before costs a
// lookup, not an allocation, and a reader that met more names than the
// bound starts afresh with the right names still.
func TestCommsInterns(t *testing.T) {
	if got := CString([]int8{'a', 'b', 0, 'c'}); got != "ab" {
		t.Errorf("CString = %q, want ab", got)
	}
	if got := CString([]uint8("full")); got != "full" {
		t.Errorf("CString without a NUL = %q, want full", got)
	}
	var c Comms
	b := comm("llama-server")
	if got := c.Of(b); got != "llama-server" {
		t.Fatalf("Of = %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = c.Of(b) }); n != 0 {
		t.Errorf("%.1f allocations for a name seen before, want 0", n)
	}
	for i := range maxComms + 10 {
		name := comm(string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676)))
		if got, want := c.Of(name), CString(name[:]); got != want {
			t.Fatalf("name %d: %q, want %q", i, got, want)
		}
	}
	if len(c.m) > maxComms {
		t.Errorf("%d names held, bound %d", len(c.m), maxComms)
	}
}
