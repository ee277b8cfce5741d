package sched

//go:generate go tool bpf2go -tags linux -target amd64,arm64 -type event -type hist -type target sched ../../bpf/sched.bpf.c -- -I../../bpf/include -Wall -Werror -Wpadded -O2 -g -mcpu=v3
