package pipeline

import (
	"reflect"
	"slices"
	"testing"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/loadgen"
)

// notSpooled are the fields of a span the spool drops on purpose: Conn,
// the socket's cookie, tells the live view's connections apart (two
// clients' same port); a run joins its spans to its own load generator's
// connections by port, and the entry stays 120 bytes. Slot, the target
// slot, tells the daemon's live targets apart; a run follows one target.
var notSpooled = map[string]bool{"Conn": true, "Slot": true}

// Every field of a span survives the spool: a field added to
// collectors.Span and not to packedSpan (nor to notSpooled) fails here.
func TestSpoolRoundTrip(t *testing.T) {
	var sp collectors.Span
	v := reflect.ValueOf(&sp).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if notSpooled[v.Type().Field(i).Name] {
			continue
		}
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.String:
			f.SetString("s" + v.Type().Field(i).Name)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(1000 + i))
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(uint64(10 + i))
		default:
			t.Fatalf("collectors.Span.%s: a %s, which the spool does not know", v.Type().Field(i).Name, f.Kind())
		}
	}
	// The bound's arithmetic (DefaultSpoolBytes' doc) and the garbage
	// collector's indifference assume this layout.
	if spoolEntryBytes != 120 {
		t.Errorf("a spool entry is %d bytes, want 120: keep packedSpan's padding used", spoolEntryBytes)
	}
	var q spool
	q.pushSpan(&sp)
	other := collectors.Span{Kind: collectors.SpanOffCPU, Detail: "sDetail", WakeCtx: "task"}
	q.pushSpan(&other)
	r := &loadgen.Record{Index: 7}
	q.pushRecord(r)
	if n := q.pushTick(42); n != 4 {
		t.Fatalf("%d entries queued, want 4", n)
	}
	cs, strs, recs := q.take()
	var got []collectors.Span
	for _, c := range cs {
		for i := range c {
			switch e := &c[i]; e.kind() {
			case spoolSpan:
				got = append(got, e.sp.span(strs))
			case spoolRecord:
				if recs[e.t] != r {
					t.Errorf("record %d is not the one pushed", e.t)
				}
			case spoolTick:
				if e.t != 42 {
					t.Errorf("tick at %d, want 42", e.t)
				}
			}
		}
	}
	if want := []collectors.Span{sp, other}; !reflect.DeepEqual(got, want) {
		t.Fatalf("spooled\n%+v\ngot back\n%+v", want, got)
	}
	if len(strs) != 6 { // "", the four strings of sp, "task"
		t.Errorf("%d strings interned, want 6: %q", len(strs), strs)
	}
	t.Logf("a spool entry takes %d bytes: %d MiB hold %d entries", spoolEntryBytes, DefaultSpoolBytes>>20, DefaultSpoolBytes/spoolEntryBytes)
	if q.peakBytes() != 4*spoolEntryBytes {
		t.Errorf("peak %d bytes, want %d", q.peakBytes(), 4*spoolEntryBytes)
	}
}

// A stream that spools while the load runs and correlates after it gives
// what correlating live gives, and so does one whose spool passes its
// bound mid-run and goes live.
func TestRunStreamDeferredMatchesLive(t *testing.T) {
	run := newSynthDaemonRun(3, 40)
	const pid = 4242
	live, _ := run.stream(t, t.TempDir(), pid)
	for _, bound := range []int64{1 << 40, 2000 * spoolEntryBytes} {
		s, _ := run.streamSpooled(t, t.TempDir(), pid, bound)
		switch {
		case bound > 1<<30 && s.liveAt != 0:
			t.Errorf("bound %d: went live at %d", bound, s.liveAt)
		case bound < 1<<30 && s.liveAt == 0:
			t.Errorf("bound %d: never went live", bound)
		}
		if s.late() != live.late() || s.spans != live.spans {
			t.Errorf("bound %d: late %d spans %d, live %d and %d", bound, s.late(), s.spans, live.late(), live.spans)
		}
		base := live.log.Baseline()
		if b := s.log.Baseline(); b != base {
			t.Fatalf("bound %d: baseline %+v, live %+v", bound, b, base)
		}
		got, want := slices.Collect(s.log.Blames(base)), slices.Collect(live.log.Blames(base))
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("bound %d: %d blames differ from the %d correlated live", bound, len(got), len(want))
		}
		gg, wg := slices.Collect(s.crit.gaps.all()), slices.Collect(live.crit.gaps.all())
		if len(wg) == 0 || !reflect.DeepEqual(gg, wg) {
			t.Fatalf("bound %d: %d critical-path gaps, live %d (or none)", bound, len(gg), len(wg))
		}
	}
}
