package agent

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/collectors"
)

// refuseLib is the one answer to a cuda_libs path the target does not
// map, whether or not a file of that name exists.
const refuseLib = "cuda_libs: %q is not a file the target maps (a path in /proc/PID/maps of pid %d or of a process below it): " +
	"name a library it has loaded, or leave cuda_libs out to probe the CUDA libraries it maps"

// maxLibPath bounds a path quoted back to the client.
const maxLibPath = 256

// mappedFile is a file a process of the target maps.
type mappedFile struct {
	pid        int
	start, end string // the mapping's range, for /proc/PID/map_files
}

// mappedFiles lists the files the processes pids map, by the path
// /proc/PID/maps gives them (the first process mapping each wins).
func mappedFiles(proc string, pids []int) map[string]mappedFile {
	out := map[string]mappedFile{}
	for _, pid := range pids {
		f, err := os.Open(proc + "/" + strconv.Itoa(pid) + "/maps")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			// start-end perms offset dev inode path
			line := sc.Text()
			fields := strings.Fields(line)
			if len(fields) < 6 || fields[4] == "0" {
				continue
			}
			i := strings.IndexByte(line, '/')
			if i < 0 {
				continue
			}
			path := strings.TrimSuffix(line[i:], " (deleted)")
			if _, ok := out[path]; ok {
				continue
			}
			start, end, _ := strings.Cut(fields[0], "-")
			out[path] = mappedFile{pid: pid, start: start, end: end}
		}
		f.Close()
	}
	return out
}

// checkLibs accepts the client's cuda_libs only when the target maps
// them: each path, cleaned (and, for a target in the agent's mount
// namespace, with its symbolic links resolved), must be a path of
// /proc/PID/maps of pid or of a process below it. It returns the paths
// the sections open: the mapped path, under /proc/PID/root for a target
// in another mount namespace. Every refusal reads the same whether or
// not a file of that name exists, and none quotes a file.
func (s *Server) checkLibs(pid int, roots []int, libs []string) ([]string, error) {
	if len(libs) == 0 {
		return nil, nil
	}
	maps := mappedFiles(s.proc, collectors.Tree(pid, roots))
	selfNS := mountNS(s.proc, os.Getpid())
	out := make([]string, 0, len(libs))
	for _, lib := range libs {
		refuse := &ForbiddenError{msg: fmt.Sprintf(refuseLib, clip(lib), pid), Detail: "not mapped by the target"}
		if !filepath.IsAbs(lib) {
			return nil, refuse
		}
		p := filepath.Clean(lib)
		m, ok := maps[p]
		if !ok && selfNS != 0 {
			// A symbolic link to a mapped file, as this namespace sees it.
			if r, err := filepath.EvalSymlinks(p); err == nil {
				if m, ok = maps[r]; ok && mountNS(s.proc, m.pid) == selfNS {
					p = r
				} else {
					ok = false
				}
			}
		}
		if !ok {
			return nil, refuse
		}
		open := p
		if ns := mountNS(s.proc, m.pid); ns == 0 || ns != selfNS {
			open = fmt.Sprintf("%s/%d/root%s", s.proc, m.pid, p)
		}
		// The file opened is the one mapped, where the mapping can be
		// read (map_files needs CAP_SYS_ADMIN): a path swapped since
		// the mapping is refused.
		var mst, ost unix.Stat_t
		if unix.Stat(fmt.Sprintf("%s/%d/map_files/%s-%s", s.proc, m.pid, m.start, m.end), &mst) == nil {
			if unix.Stat(open, &ost) != nil || ost.Dev != mst.Dev || ost.Ino != mst.Ino {
				refuse.Detail = "the path no longer names the file mapped"
				return nil, refuse
			}
		}
		out = append(out, open)
	}
	return out, nil
}

// mountNS is the inode of pid's mount namespace (0: unknown).
func mountNS(proc string, pid int) uint64 {
	var st unix.Stat_t
	if unix.Stat(fmt.Sprintf("%s/%d/ns/mnt", proc, pid), &st) != nil {
		return 0
	}
	return st.Ino
}

func clip(s string) string {
	if len(s) > maxLibPath {
		return s[:maxLibPath] + "..."
	}
	return s
}

// elfRecordRE matches what debug/elf's FormatError quotes of a file: the
// value it read and where ("bad magic number '[114 111 111 116]' in
// record at byte 0x0").
var elfRecordRE = regexp.MustCompile(`(?s)( '.*?')? ?in record at byte 0x[0-9a-f]+`)

// sanitize removes from an error that goes to a client anything a
// collector quoted of a file it read (an ELF parser's view of bytes that
// were not an ELF file): the API never answers with a file's content.
func sanitize(msg string) string {
	return elfRecordRE.ReplaceAllString(msg, "(not an ELF file this agent can read)")
}
