package blockio

//go:generate go tool bpf2go -tags linux -target amd64,arm64 -type event -type dev_key -type io_stats -type target blockio ../../bpf/blockio.bpf.c -- -I../../bpf/include -Wall -Werror -Wpadded -O2 -g
