package testutil

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Scrape GETs url (a /metrics address) and returns its body, or fails t.
func Scrape(t testing.TB, url string) string {
	t.Helper()
	body, err := TryScrape(url)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	return body
}

// TryScrape GETs url and returns its body; an error for a status other
// than 200, or none reached (for a wait that tries again).
func TryScrape(url string) (string, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), &statusError{resp.Status}
	}
	return string(b), nil
}

type statusError struct{ status string }

func (e *statusError) Error() string { return "status " + e.status }

// Samples maps each sample of a text exposition, name{labels} as written,
// to its value; comments and unparsable lines are left out.
func Samples(body string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// SeriesValue is the value of a text exposition line of metric name
// whose labels hold label ("" for any, a line without labels included).
func SeriesValue(line, name, label string) (float64, bool) {
	if !strings.HasPrefix(line, name+"{") && !(label == "" && strings.HasPrefix(line, name+" ")) {
		return 0, false
	}
	if !strings.Contains(line, label) {
		return 0, false
	}
	i := strings.LastIndexByte(line, ' ')
	v, err := strconv.ParseFloat(line[i+1:], 64)
	return v, err == nil
}

// Sum adds the values of metric name's series whose labels hold label in
// body; false when there is none.
func Sum(body, name, label string) (float64, bool) {
	var sum float64
	found := false
	for line := range strings.Lines(body) {
		if v, ok := SeriesValue(strings.TrimSuffix(line, "\n"), name, label); ok {
			sum, found = sum+v, true
		}
	}
	return sum, found
}

// WaitMetric scrapes url until its body holds substr (a series, a label
// set) and returns that body, or fails t with the last body.
func WaitMetric(t testing.TB, url, substr string, timeout time.Duration) string {
	t.Helper()
	var body string
	var err error
	if !Until(timeout, func() bool {
		body, err = TryScrape(url)
		return err == nil && strings.Contains(body, substr)
	}) {
		t.Fatalf("%s has no %q within %v (last scrape: %v)\n%s", url, substr, timeout, err, body)
	}
	return body
}

// Value is the sum of metric name's series whose labels hold label on
// url (a /metrics address); 0 when url does not answer or has none.
func Value(url, name, label string) float64 {
	body, err := TryScrape(url)
	if err != nil {
		return 0
	}
	v, _ := Sum(body, name, label)
	return v
}
