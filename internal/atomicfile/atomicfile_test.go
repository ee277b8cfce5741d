package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

// envChild makes the test binary a writer that creates its argument with
// Create, says so on stdout and waits to be killed.
const envChild = "ATOMICFILE_TEST_WRITER"

func TestMain(m *testing.M) {
	if p := os.Getenv(envChild); p != "" {
		f, err := Create(p, 0o644)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Fprintln(f, "partial")
		fmt.Println("writing")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// names lists dir.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "result.json")
	if err := WriteFile(p, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "two" {
		t.Errorf("content %q: %v", b, err)
	}
	st, _ := os.Stat(p)
	if want := os.FileMode(0o644) &^ umask(); st.Mode().Perm() != want {
		t.Errorf("mode %v, want %v", st.Mode().Perm(), want)
	}
	if n := names(t, dir); !slices.Equal(n, []string{"result.json"}) {
		t.Errorf("directory holds %v", n)
	}
}

func umask() os.FileMode {
	m := syscall.Umask(0)
	syscall.Umask(m)
	return os.FileMode(m)
}

// An error while writing leaves the old content and no temporary file,
// and says which file.
func TestWriteErrorKeepsOld(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "report.html")
	if err := WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("rendering failed")
	err := Write(p, 0o644, func(w *bufio.Writer) error {
		io.WriteString(w, "new, half")
		return boom
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "writing "+p+": rendering failed") {
		t.Errorf("error %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("content %q, want the old", b)
	}
	if n := names(t, dir); !slices.Equal(n, []string{"report.html"}) {
		t.Errorf("directory holds %v", n)
	}
	// Close without Commit drops a streamed file.
	f, err := Create(filepath.Join(dir, "trace.json"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(f, "{")
	if err := f.Close(); err != nil {
		t.Error(err)
	}
	f.Close() // idempotent
	if err := f.Commit(); err == nil {
		t.Error("Commit after Close succeeded")
	}
	if n := names(t, dir); !slices.Equal(n, []string{"report.html"}) {
		t.Errorf("directory holds %v after an aborted file", n)
	}
	if err := WriteFile(filepath.Join(dir, "no-such-dir", "x.json"), nil, 0o644); err == nil ||
		!strings.Contains(err.Error(), "writing "+filepath.Join(dir, "no-such-dir", "x.json")) {
		t.Errorf("a missing directory: %v", err)
	}
}

// startWriter runs a child that holds path's temporary file open, as a
// run does while it writes its trace.
func startWriter(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "writing\n" {
		t.Fatalf("writer: %q", line)
	}
	return cmd
}

// A writer that was killed leaves its temporary file; the next Clean (or
// Create) in that directory removes it, but never the file of a writer
// that is still running, nor anything not ours.
func TestCleanStalePartials(t *testing.T) {
	dir := t.TempDir()
	// This process's own file in progress.
	own, err := Create(filepath.Join(dir, "report.html"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	live := startWriter(t, filepath.Join(dir, "result.json"))
	killed := startWriter(t, filepath.Join(dir, "trace.json"))
	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed.Wait()
	// Not ours: left alone.
	for _, n := range []string{".hidden", "result.json.tmp", ".x.tmp-12", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// An earlier release's partial trace: removed once old.
	fresh, old := filepath.Join(dir, ".trace.json.partial-111"), filepath.Join(dir, ".trace.json.partial-222")
	for _, p := range []string{fresh, old} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * LegacyAge)
	os.Chtimes(old, past, past)
	before := names(t, dir)
	removed, err := Clean(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if len(removed) != 2 || !strings.HasPrefix(removed[0], ".trace.json.partial-222") || !strings.HasPrefix(removed[1], ".trace.json.tmp-") {
		t.Errorf("removed %v from %v: want the killed writer's and the old partial", removed, before)
	}
	after := names(t, dir)
	var tmps []string
	for _, n := range after {
		if strings.Contains(n, ".tmp-") && n != ".x.tmp-12" {
			tmps = append(tmps, n)
		}
	}
	if len(tmps) != 2 || !slices.ContainsFunc(tmps, func(n string) bool { return strings.HasPrefix(n, ".result.json.tmp-") }) ||
		!slices.ContainsFunc(tmps, func(n string) bool { return strings.HasPrefix(n, ".report.html.tmp-") }) {
		t.Errorf("left %v: want the live writer's and this process's", tmps)
	}
	for _, n := range []string{".hidden", "result.json.tmp", ".x.tmp-12", "notes.txt", ".trace.json.partial-111"} {
		if !slices.Contains(after, n) {
			t.Errorf("%s was removed", n)
		}
	}
	// Once the live writer is gone, its file goes too.
	live.Process.Signal(syscall.SIGKILL)
	live.Wait()
	if removed, _ := Clean(dir); len(removed) != 1 || !strings.HasPrefix(removed[0], ".result.json.tmp-") {
		t.Errorf("after the second writer's kill, removed %v", removed)
	}
	if err := own.Commit(); err != nil {
		t.Errorf("this process's file was disturbed: %v", err)
	}
}

// A file whose lock is held by another open file (a writer of another
// process, seen through its own descriptor) is not removed.
func TestCleanHonoursLock(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, ".result.json.tmp-1-2")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if removed, _ := Clean(dir); len(removed) != 0 {
		t.Errorf("removed %v, a locked file", removed)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	if removed, _ := Clean(dir); len(removed) != 1 {
		t.Errorf("removed %v, want the unlocked file", removed)
	}
}

// On a full file system the write fails, naming the file and the cause,
// the old content stays and no temporary file is left.
func TestFullDisk(t *testing.T) {
	dir := privtest.Tmpfs(t, "1m")
	p := filepath.Join(dir, "result.json")
	if err := WriteFile(p, []byte(`{"old":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 2<<20)
	err := WriteFile(p, big, 0o644)
	if !errors.Is(err, syscall.ENOSPC) || err.Error() != "writing "+p+": no space left on device" {
		t.Errorf("error %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != `{"old":true}` {
		t.Errorf("content %.40q, want the old", b)
	}
	if n := names(t, dir); !slices.Equal(n, []string{"result.json"}) {
		t.Errorf("directory holds %v", n)
	}
}
