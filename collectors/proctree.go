package collectors

import (
	"os"
	"strconv"
	"strings"
)

// Descendants is every process below pid, from /proc/PID/task/*/children
// (a server of several processes: vLLM's API server and EngineCore, a
// frontend and its engine). Processes that end while it reads are left
// out.
func Descendants(pid int) []int {
	var out []int
	seen := map[int]bool{pid: true}
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
		for _, t := range tasks {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/task/" + t.Name() + "/children")
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				c, err := strconv.Atoi(f)
				if err != nil || seen[c] {
					continue
				}
				seen[c] = true
				out = append(out, c)
				queue = append(queue, c)
			}
		}
	}
	return out
}
