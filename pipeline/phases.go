package pipeline

import (
	"sync"

	"github.com/bpfbench/bpfbench/internal/clock"
)

// PhaseMarks records where the phases of a scenario begin.
type PhaseMarks struct {
	mu    sync.Mutex
	marks []phaseMark
}

type phaseMark struct {
	name string
	ns   int64
}

// Begin starts a phase now.
func (p *PhaseMarks) Begin(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marks = append(p.marks, phaseMark{name, clock.Now()})
}

// End ends the current phase now without starting another: the time until
// the next Begin belongs to no phase (a server settling after an
// injection, its queue draining).
func (p *PhaseMarks) End() { p.Begin("") }

// spans are the phases, each from its mark to the next mark (or end);
// the marks of End are no phase.
func (p *PhaseMarks) spans(end int64) []critPhase {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []critPhase
	for i, m := range p.marks {
		if m.name == "" {
			continue
		}
		to := end
		if i+1 < len(p.marks) {
			to = p.marks[i+1].ns
		}
		out = append(out, critPhase{name: m.name, from: m.ns, to: to})
	}
	return out
}

// Phase is a phase's span of time (monotonic ns).
type Phase struct {
	Name     string
	From, To int64
}

// Phases are the phases that end by end, each from its mark to the next
// (or end).
func (p *PhaseMarks) Phases(end int64) []Phase {
	var out []Phase
	for _, c := range p.spans(end) {
		out = append(out, Phase{Name: c.name, From: c.from, To: c.to})
	}
	return out
}
