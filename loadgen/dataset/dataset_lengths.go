package dataset

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
)

// maxExpandedLengths is the most lengths a histogram is expanded into; a
// larger one is sampled from its distribution instead.
const maxExpandedLengths = 1 << 22

// Lengths is a distribution of token lengths read from a file: either one
// integer a line (a sample, taken in the file's order and cycled) or a
// histogram CSV of "len,count" lines (expanded into count copies of each
// length and shuffled with the seed, so that any multiple of the total
// count reproduces the histogram exactly; past 4Mi lengths it is sampled
// with the seed instead). Blank lines, "#" comments and a non-numeric
// first line (a CSV header) are skipped.
type Lengths struct {
	Path string
	// Histogram is set for a "len,count" file.
	Histogram bool
	values    []int   // the lengths in the order they are used
	cum       []int64 // sampled histograms: cumulative counts
	lens      []int   // sampled histograms: the lengths
	rng       *rand.Rand
	// SHA256 is the hash of the file's bytes.
	SHA256 string
}

// ReadLengths reads a length file; seed shuffles (or samples) a histogram.
func ReadLengths(path string, seed uint64) (*Lengths, error) {
	if path == "" {
		return nil, errors.New("length file: no path given")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the length file: %w", err)
	}
	l := &Lengths{Path: path, SHA256: sha256Hex(b), rng: rand.New(rand.NewPCG(seed, 0x6c656e73))}
	counts, err := l.parse(b)
	if err != nil {
		return nil, err
	}
	if !l.Histogram {
		if len(l.values) == 0 {
			return nil, fmt.Errorf("length file %s holds no length", path)
		}
		return l, nil
	}
	if err := l.setCounts(counts); err != nil {
		return nil, err
	}
	return l, nil
}

// parse reads the lines of the file b: single lengths into l.values, or a
// histogram's lengths into l.lens and their counts (those above 0) into
// counts.
func (l *Lengths) parse(b []byte) (counts []int64, err error) {
	path := l.Path
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line, seen := 0, 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		seen++
		lenField, countField, isCSV := strings.Cut(s, ",")
		if seen == 1 {
			l.Histogram = isCSV
			if _, err := strconv.Atoi(strings.TrimSpace(lenField)); err != nil && isCSV {
				continue // a CSV header such as "len,count"
			}
		}
		if isCSV != l.Histogram {
			return nil, fmt.Errorf("%s:%d: %q: the file mixes single lengths and len,count lines", path, line, s)
		}
		n, err := strconv.Atoi(strings.TrimSpace(lenField))
		if err != nil || n < 1 || n > MaxPromptLen {
			return nil, fmt.Errorf("%s:%d: %q: want a positive integer length up to %d (one a line, or len,count)", path, line, s, MaxPromptLen)
		}
		if !l.Histogram {
			l.values = append(l.values, n)
			continue
		}
		c, err := strconv.ParseInt(strings.TrimSpace(countField), 10, 64)
		if err != nil || c < 0 {
			return nil, fmt.Errorf("%s:%d: %q: want len,count with a count >= 0", path, line, s)
		}
		if c > 0 {
			l.lens = append(l.lens, n)
			counts = append(counts, c)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return counts, nil
}

// setCounts makes the histogram of l.lens with counts usable: expanded
// into l.values and shuffled, or, past maxExpandedLengths, cumulated for
// sampling.
func (l *Lengths) setCounts(counts []int64) error {
	var total int64
	for _, c := range counts {
		total += c
		if total < 0 {
			return fmt.Errorf("length file %s: the counts overflow", l.Path)
		}
	}
	if total == 0 {
		return fmt.Errorf("length file %s: every count is zero", l.Path)
	}
	if total <= maxExpandedLengths {
		l.values = make([]int, 0, total)
		for i, c := range counts {
			for ; c > 0; c-- {
				l.values = append(l.values, l.lens[i])
			}
		}
		l.rng.Shuffle(len(l.values), func(i, j int) { l.values[i], l.values[j] = l.values[j], l.values[i] })
		l.lens = nil
		return nil
	}
	l.cum = make([]int64, len(counts))
	var acc int64
	for i, c := range counts {
		acc += c
		l.cum[i] = acc
	}
	return nil
}

// At returns the i-th length (i >= 0).
func (l *Lengths) At(i int) int {
	if l.values != nil {
		return l.values[i%len(l.values)]
	}
	// A sampled histogram: draws are made in order, so At must be called
	// with i = 0, 1, 2, ... for the result to depend on the seed alone.
	u := l.rng.Int64N(l.cum[len(l.cum)-1])
	return l.lens[sort.Search(len(l.cum), func(k int) bool { return l.cum[k] > u })]
}

// Len is the number of lengths the file gives before they cycle (0 for a
// sampled histogram).
func (l *Lengths) Len() int { return len(l.values) }
