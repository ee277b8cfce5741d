package report

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/result"
)

// chromiumPath is where Debian's chromium package installs the browser.
const chromiumPath = "/usr/bin/chromium"

// cdpMsg is one DevTools protocol message (a response or an event).
type cdpMsg struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// browser drives a headless Chromium over --remote-debugging-pipe: the
// browser reads NUL-terminated JSON messages on fd 3 and writes its own
// on fd 4.
type browser struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	out    io.WriteCloser

	mu      sync.Mutex
	nextID  int
	pending map[int]chan cdpMsg
	events  []cdpMsg
	notify  chan struct{}
	done    chan struct{}
	readErr error
}

func startBrowser(ctx context.Context, t *testing.T) *browser {
	t.Helper()
	toBrowserR, toBrowserW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromBrowserR, fromBrowserW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{out: toBrowserW, pending: map[int]chan cdpMsg{}, notify: make(chan struct{}, 1), done: make(chan struct{})}
	b.cmd = exec.Command(chromiumPath,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
		"--user-data-dir="+t.TempDir(), "--window-size=1280,2000", "--remote-debugging-pipe", "about:blank")
	b.cmd.ExtraFiles = []*os.File{toBrowserR, fromBrowserW}
	b.cmd.Stderr = &b.stderr
	// its own process group, so that the renderer and helper processes go
	// with it when the test ends
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", chromiumPath, err)
	}
	toBrowserR.Close()
	fromBrowserW.Close()
	go b.read(fromBrowserR)
	t.Cleanup(func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, _ = b.call(closeCtx, "", "Browser.close", nil)
		exited := make(chan struct{})
		go func() { _ = b.cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		b.out.Close()
		fromBrowserR.Close()
	})
	go func() {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		case <-b.done:
		}
	}()
	return b
}

func (b *browser) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := br.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			b.readErr = err
			for id, ch := range b.pending {
				close(ch)
				delete(b.pending, id)
			}
			b.mu.Unlock()
			close(b.done)
			return
		}
		var m cdpMsg
		if err := json.Unmarshal(bytes.TrimSuffix(line, []byte{0}), &m); err != nil {
			continue
		}
		b.mu.Lock()
		if m.ID != 0 {
			if ch, ok := b.pending[m.ID]; ok {
				ch <- m
				delete(b.pending, m.ID)
			}
		} else {
			b.events = append(b.events, m)
			select {
			case b.notify <- struct{}{}:
			default:
			}
		}
		b.mu.Unlock()
	}
}

// call sends one command (to a page session when session is not "") and
// waits for its result.
func (b *browser) call(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	b.mu.Lock()
	if b.readErr != nil {
		b.mu.Unlock()
		return nil, fmt.Errorf("%s: browser gone: %w", method, b.readErr)
	}
	b.nextID++
	id := b.nextID
	ch := make(chan cdpMsg, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	if _, err := b.out.Write(append(data, 0)); err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("%s: browser closed the pipe", method)
		}
		if m.Error != nil {
			return nil, fmt.Errorf("%s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		return m.Result, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// waitEvent waits for an event of the session whose index is at least from.
func (b *browser) waitEvent(ctx context.Context, session, method string, from int) error {
	for {
		b.mu.Lock()
		for _, e := range b.events[from:] {
			if e.Method == method && e.SessionID == session {
				b.mu.Unlock()
				return nil
			}
		}
		gone := b.readErr
		b.mu.Unlock()
		if gone != nil {
			return fmt.Errorf("waiting for %s: browser gone: %w", method, gone)
		}
		select {
		case <-b.notify:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", method, ctx.Err())
		}
	}
}

func (b *browser) eventCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.events)
}

func (b *browser) eventsSince(from int) []cdpMsg {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]cdpMsg(nil), b.events[from:]...)
}

// problems lists what a page did wrong among events: console calls,
// uncaught exceptions, error log entries and any request for something
// other than the page itself.
func problems(events []cdpMsg, pageURL string) []string {
	var out []string
	for _, e := range events {
		switch e.Method {
		case "Runtime.consoleAPICalled":
			var p struct {
				Type string            `json:"type"`
				Args []json.RawMessage `json:"args"`
			}
			_ = json.Unmarshal(e.Params, &p)
			out = append(out, fmt.Sprintf("console.%s: %s", p.Type, e.Params))
		case "Runtime.exceptionThrown":
			out = append(out, "uncaught exception: "+string(e.Params))
		case "Log.entryAdded":
			var p struct {
				Entry struct {
					Level, Source, Text, URL string
				} `json:"entry"`
			}
			_ = json.Unmarshal(e.Params, &p)
			if p.Entry.Level == "error" || p.Entry.Level == "warning" {
				out = append(out, fmt.Sprintf("log %s (%s): %s %s", p.Entry.Level, p.Entry.Source, p.Entry.Text, p.Entry.URL))
			}
		case "Network.requestWillBeSent":
			var p struct {
				Request struct{ URL string } `json:"request"`
			}
			_ = json.Unmarshal(e.Params, &p)
			if p.Request.URL != pageURL && !strings.HasPrefix(p.Request.URL, "data:") {
				out = append(out, "network request: "+p.Request.URL)
			}
		case "Network.loadingFailed":
			out = append(out, "loading failed: "+string(e.Params))
		}
	}
	return out
}

type chartInfo struct {
	ID       string  `json:"id"`
	Found    bool    `json:"found"`
	Tag      string  `json:"tag"`
	Elements int     `json:"elements"`
	Width    float64 `json:"width"`
	Height   float64 `json:"height"`
}

const chartProbe = `JSON.stringify(%s.map(function (id) {
	var e = document.getElementById(id);
	if (!e) return {id: id, found: false};
	var r = e.getBoundingClientRect();
	return {id: id, found: true, tag: e.tagName.toLowerCase(), elements: e.querySelectorAll("*").length, width: r.width, height: r.height};
}))`

// loadPage opens file in the session and returns the page's problems, its
// charts and a PNG screenshot of the whole page.
func loadPage(ctx context.Context, t *testing.T, b *browser, session, file string) ([]string, []chartInfo, []byte) {
	t.Helper()
	pageURL := (&url.URL{Scheme: "file", Path: file}).String()
	from := b.eventCount()
	res, err := b.call(ctx, session, "Page.navigate", map[string]any{"url": pageURL})
	if err != nil {
		t.Fatal(err)
	}
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	_ = json.Unmarshal(res, &nav)
	if nav.ErrorText != "" {
		t.Fatalf("navigating to %s: %s", pageURL, nav.ErrorText)
	}
	if err := b.waitEvent(ctx, session, "Page.loadEventFired", from); err != nil {
		t.Fatal(err)
	}
	ids, _ := json.Marshal(chartIDs)
	res, err = b.call(ctx, session, "Runtime.evaluate", map[string]any{
		"expression": fmt.Sprintf(chartProbe, ids), "returnByValue": true,
	})
	if err != nil {
		t.Fatal(err)
	}
	var ev struct {
		Result struct {
			Value string `json:"value"`
		} `json:"result"`
		ExceptionDetails json.RawMessage `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &ev); err != nil || ev.ExceptionDetails != nil {
		t.Fatalf("probing the charts: %v %s", err, ev.ExceptionDetails)
	}
	var charts []chartInfo
	if err := json.Unmarshal([]byte(ev.Result.Value), &charts); err != nil {
		t.Fatalf("probe result %q: %v", ev.Result.Value, err)
	}
	res, err = b.call(ctx, session, "Page.getLayoutMetrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	var lm struct {
		Content struct{ Width, Height float64 } `json:"cssContentSize"`
	}
	_ = json.Unmarshal(res, &lm)
	h := min(max(lm.Content.Height, 2000), 12000)
	res, err = b.call(ctx, session, "Page.captureScreenshot", map[string]any{
		"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": 0, "width": 1280, "height": h, "scale": 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	var shot struct {
		Data string `json:"data"`
	}
	_ = json.Unmarshal(res, &shot)
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	// give late console messages a moment to arrive
	time.Sleep(200 * time.Millisecond)
	return problems(b.eventsSince(from), pageURL), charts, png
}

// widthInfo is what the layout probe reads: the viewport's width, the
// document's, and every table's with the width of the box it is laid in.
type widthInfo struct {
	Viewport float64      `json:"viewport"`
	Document float64      `json:"document"`
	Tables   []tableWidth `json:"tables"`
}

type tableWidth struct {
	// Where names the table: its id, else its section's and its heading.
	Where string  `json:"where"`
	Width float64 `json:"width"`
	Right float64 `json:"right"`
	// Room is the content width of the table's parent.
	Room float64 `json:"room"`
}

// widthProbe measures the page as laid out. A table in an overflow-x
// container does not widen the document, so each table is also held to
// the width of its parent.
const widthProbe = `JSON.stringify((function () {
	var out = {viewport: window.innerWidth, document: document.documentElement.scrollWidth, tables: []};
	document.querySelectorAll("table").forEach(function (t) {
		var where = t.id;
		if (!where) {
			var s = t.closest("[id]"), h = t.parentElement.previousElementSibling;
			where = (s ? s.id : "page") + (h && /^H[1-6]$/.test(h.tagName) ? " / " + h.textContent : "");
		}
		var r = t.getBoundingClientRect(), p = t.parentElement, cs = getComputedStyle(p);
		var room = p.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
		out.tables.push({where: where, width: Math.max(r.width, t.scrollWidth), right: r.right, room: room});
	});
	return out;
})())`

// widths runs the width probe on the page loaded in the session.
func widths(ctx context.Context, t *testing.T, b *browser, session string) widthInfo {
	t.Helper()
	res, err := b.call(ctx, session, "Runtime.evaluate", map[string]any{"expression": widthProbe, "returnByValue": true})
	if err != nil {
		t.Fatal(err)
	}
	var ev struct {
		Result struct {
			Value string `json:"value"`
		} `json:"result"`
		ExceptionDetails json.RawMessage `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &ev); err != nil || ev.ExceptionDetails != nil {
		t.Fatalf("probing the widths: %v %s", err, ev.ExceptionDetails)
	}
	var w widthInfo
	if err := json.Unmarshal([]byte(ev.Result.Value), &w); err != nil {
		t.Fatalf("width probe result %q: %v", ev.Result.Value, err)
	}
	return w
}

// overflows lists what is wider than the window, or than the box it is in.
func (w widthInfo) overflows() []string {
	const slack = 0.5 // sub-pixel rounding
	var out []string
	if w.Viewport <= 0 {
		return []string{fmt.Sprintf("viewport is %.0f px wide", w.Viewport)}
	}
	if w.Document > w.Viewport+slack {
		out = append(out, fmt.Sprintf("the document is %.0f px wide in a %.0f px window", w.Document, w.Viewport))
	}
	for _, t := range w.Tables {
		switch {
		case t.Right > w.Viewport+slack:
			out = append(out, fmt.Sprintf("table %q is %.0f px wide and ends at %.0f px, past the %.0f px window", t.Where, t.Width, t.Right, w.Viewport))
		case t.Width > t.Room+slack:
			out = append(out, fmt.Sprintf("table %q is %.0f px wide in %.0f px of room", t.Where, t.Width, t.Room))
		}
	}
	return out
}

// checkScreenshot decodes a PNG and fails when it is blank or lacks the
// cause colors (the attribution and timeline charts paint them).
func checkScreenshot(t *testing.T, data []byte, wantColors []string) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	bnd := img.Bounds()
	if bnd.Dx() < 1000 || bnd.Dy() < 1000 {
		t.Fatalf("screenshot is %v", bnd)
	}
	colors := map[[3]uint8]int{}
	nonWhite := 0
	total := 0
	for y := bnd.Min.Y; y < bnd.Max.Y; y += 2 {
		for x := bnd.Min.X; x < bnd.Max.X; x += 2 {
			r, g, b, _ := img.At(x, y).RGBA()
			c := [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8)}
			colors[c]++
			total++
			if c != [3]uint8{255, 255, 255} {
				nonWhite++
			}
		}
	}
	if len(colors) < 64 {
		t.Errorf("screenshot has only %d distinct colors: blank?", len(colors))
	}
	if frac := float64(nonWhite) / float64(total); frac < 0.05 {
		t.Errorf("screenshot is %.1f%% non-white: blank?", frac*100)
	}
	for _, hex := range wantColors {
		var want [3]uint8
		if _, err := fmt.Sscanf(hex, "#%02x%02x%02x", &want[0], &want[1], &want[2]); err != nil {
			t.Fatal(err)
		}
		if colors[want] < 50 {
			t.Errorf("screenshot shows color %s in %d sampled pixels: the chart that uses it did not paint", hex, colors[want])
		}
	}
}

// TestReportInChromium loads rendered pages in headless Chromium and
// checks that they raise no console error and request nothing, that the
// charts are in the DOM with content and a size, and that the screenshot
// is a PNG with the charts' colors in it; and that in a 1280 px window
// neither the page nor any table is wider than its room (a table in a
// scrolling box counts as too wide when it needs the scrolling).
func TestReportInChromium(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		privtest.SkipOptional(t, "needs Debian's chromium at %s (apt-get install chromium)", chromiumPath)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	dir := t.TempDir()
	pages := []struct {
		name string
		doc  *result.Document
	}{{"full", fullDocument()}, {"empty", emptyDocument()}, {"failed", failedDocument()}, {"missing", missingSections()}, {"gpu", gpuDocument()},
		{"injections", injectionDocument()}, {"critical path only", criticalPathOnlyDocument()}}
	for _, p := range pages {
		writePage(t, filepath.Join(dir, p.name+".html"), p.doc)
	}

	b := startBrowser(ctx, t)
	session := openPageSession(ctx, t, b)
	for _, p := range pages {
		t.Run(p.name, func(t *testing.T) {
			checkReportPage(ctx, t, b, session, dir, p.name)
		})
	}
	// the harness itself: a page that errs and fetches must be caught
	t.Run("harness", func(t *testing.T) {
		checkHarnessCatches(ctx, t, b, session, dir)
	})
	// and so must a page wider than the window, or a table wider than
	// the box that scrolls it
	t.Run("harness-width", func(t *testing.T) {
		checkHarnessWidth(ctx, t, b, session, dir)
	})
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("the browser test ran out of time; chromium stderr:\n%s", tail(b.stderr.String()))
	}
}

// writePage writes d's HTML to path.
func writePage(t *testing.T, path string, d *result.Document) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteHTML(f, d); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// openPageSession opens a blank page in b, 1280 px wide, with the page,
// runtime, log and network events on: its session.
func openPageSession(ctx context.Context, t *testing.T, b *browser) string {
	t.Helper()
	res, err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"})
	if err != nil {
		t.Fatalf("%v\nchromium stderr:\n%s", err, tail(b.stderr.String()))
	}
	var target struct {
		TargetID string `json:"targetId"`
	}
	_ = json.Unmarshal(res, &target)
	res, err = b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true})
	if err != nil {
		t.Fatal(err)
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(res, &att)
	for _, m := range []string{"Page.enable", "Runtime.enable", "Log.enable", "Network.enable"} {
		if _, err := b.call(ctx, att.SessionID, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.call(ctx, att.SessionID, "Emulation.setDeviceMetricsOverride", map[string]any{
		"width": 1280, "height": 2000, "deviceScaleFactor": 1, "mobile": false,
	}); err != nil {
		t.Fatal(err)
	}
	return att.SessionID
}

// checkReportPage loads dir's page name and checks it: no problem, no
// table wider than its room, the charts drawn, the screenshot with the
// causes' colours (the full page).
func checkReportPage(ctx context.Context, t *testing.T, b *browser, session, dir, name string) {
	t.Helper()
	probs, charts, shot := loadPage(ctx, t, b, session, filepath.Join(dir, name+".html"))
	for _, pr := range probs {
		t.Errorf("page problem: %s", pr)
	}
	w := widths(ctx, t, b, session)
	if w.Viewport != 1280 || len(w.Tables) == 0 && name != "empty" {
		t.Errorf("width probe: %+v", w)
	}
	for _, o := range w.overflows() {
		t.Errorf("%s", o)
	}
	if len(charts) != len(chartIDs) {
		t.Fatalf("charts: %+v", charts)
	}
	for _, c := range charts {
		if !c.Found || c.Tag != "svg" || c.Elements < 2 || c.Width < 200 || c.Height < 40 {
			t.Errorf("chart %s not drawn: %+v", c.ID, c)
		}
		if name == "full" && c.Elements < 20 {
			t.Errorf("chart %s has only %d elements", c.ID, c.Elements)
		}
	}
	shotPath := filepath.Join(dir, name+".png")
	if err := os.WriteFile(shotPath, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	if out := os.Getenv("BPFBENCH_REPORT_SCREENSHOTS"); out != "" {
		_ = os.WriteFile(filepath.Join(out, name+".png"), shot, 0o644)
	}
	var want []string
	if name == "full" {
		for _, n := range []string{"cpu_runqueue", "io_block", "gpu_sync", "net_backpressure", "server_compute", "unexplained"} {
			want = append(want, causeOf(n, 0).Color)
		}
	}
	checkScreenshot(t, shot, want)
}

// checkHarnessCatches checks that the harness catches a page that errs and
// fetches.
func checkHarnessCatches(ctx context.Context, t *testing.T, b *browser, session, dir string) {
	t.Helper()
	bad := filepath.Join(dir, "bad.html")
	page := `<!DOCTYPE html><html><body><p>x</p><script>console.error("boom"); undefinedFunction();</script>` +
		`<img src="http://192.0.2.1/x.png"></body></html>`
	if err := os.WriteFile(bad, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	probs, charts, _ := loadPage(ctx, t, b, session, bad)
	joined := strings.Join(probs, "\n")
	for _, want := range []string{"console.error", "uncaught exception", "network request: http://192.0.2.1/x.png"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the harness missed %q; it saw:\n%s", want, joined)
		}
	}
	for _, c := range charts {
		if c.Found {
			t.Errorf("chart %s found in a page without charts", c.ID)
		}
	}
}

// checkHarnessWidth checks that the harness catches a page wider than the
// window, and a table wider than the box that scrolls it.
func checkHarnessWidth(ctx context.Context, t *testing.T, b *browser, session, dir string) {
	t.Helper()
	wide := filepath.Join(dir, "wide.html")
	page := `<!DOCTYPE html><html><body><div style="width:300px;overflow-x:auto"><table id="t-wide"><tr><td style="white-space:nowrap">` +
		strings.Repeat("wide cell ", 8) + `</td></tr></table></div><table id="t-ok"><tr><td>fits</td></tr></table>` +
		`<div style="width:1500px">x</div></body></html>`
	if err := os.WriteFile(wide, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	loadPage(ctx, t, b, session, wide)
	w := widths(ctx, t, b, session)
	got := strings.Join(w.overflows(), "\n")
	for _, want := range []string{"the document is 15", "px wide in a 1280 px window", `table "t-wide" is `, " px wide in 300 px of room"} {
		if !strings.Contains(got, want) {
			t.Errorf("the width check missed %q; it saw:\n%s", want, got)
		}
	}
	if strings.Contains(got, "t-ok") || len(w.Tables) != 2 {
		t.Errorf("the width check: %+v\n%s", w, got)
	}
}

func tail(s string) string {
	if len(s) > 4000 {
		return s[len(s)-4000:]
	}
	return s
}
