package tcp

//go:generate go tool bpf2go -tags linux -target amd64,arm64 -type event -type sock_info -type listen_key -type tstats -type target tcp ../../bpf/tcp.bpf.c -- -I../../bpf/include -Wall -Werror -Wpadded -O2 -g
