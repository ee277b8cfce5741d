package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// hostVeth is a network namespace joined to the host by a veth pair:
// HostAddr (10.B.X.1/24) on HostIf in this namespace, Addr (10.B.X.2/24)
// on Peer inside Netns.
type hostVeth struct {
	Netns, HostIf, Peer string
	HostAddr, Addr      string
}

// newHostVeth makes a hostVeth named after prefix on the first 10.b.X.0/24
// from X = from that no interface of the host has, removed at the test's
// end. A killed test leaves its pair behind, and a host address on the
// subnet would answer the namespace's in its place (refusals).
func newHostVeth(t *testing.T, prefix string, b, from int) *hostVeth {
	t.Helper()
	used := map[int]bool{}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip := ipn.IP.To4(); ip != nil && ip[0] == 10 && int(ip[1]) == b {
					used[int(ip[2])] = true
				}
			}
		}
	}
	id := os.Getpid() % 10000
	for x := from; x < 250; x++ {
		v := &hostVeth{Netns: fmt.Sprintf("%se%d-%d", prefix, id, x), HostIf: fmt.Sprintf("%sh%d-%d", prefix, id, x),
			Peer: fmt.Sprintf("%sp%d-%d", prefix, id, x), HostAddr: fmt.Sprintf("10.%d.%d.1", b, x), Addr: fmt.Sprintf("10.%d.%d.2", b, x)}
		if used[x] || exec.Command("ip", "netns", "add", v.Netns).Run() != nil {
			continue // taken, or a namespace of that name is left over
		}
		v.join(t)
		return v
	}
	t.Fatalf("no free 10.%d.X.0/24 subnet from 10.%d.%d.0 for a network namespace", b, b, from)
	return nil
}

// join adds the veth pair and the addresses to v's namespace, just made.
func (v *hostVeth) join(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", v.Netns).Run() // deletes the veth pair too
		_ = exec.Command("ip", "link", "del", v.HostIf).Run()
	})
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	sh("link", "add", v.HostIf, "type", "veth", "peer", "name", v.Peer)
	sh("link", "set", v.Peer, "netns", v.Netns)
	sh("addr", "add", v.HostAddr+"/24", "dev", v.HostIf)
	sh("link", "set", v.HostIf, "up")
	sh("-n", v.Netns, "addr", "add", v.Addr+"/24", "dev", v.Peer)
	sh("-n", v.Netns, "link", "set", v.Peer, "up")
	sh("-n", v.Netns, "link", "set", "lo", "up")
}
