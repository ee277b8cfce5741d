package cuda

//go:generate go tool bpf2go -tags linux -target amd64,arm64 -type event -type counts -type hist -type target -type dims_key -type launcher cuda ../../bpf/cuda.bpf.c -- -I../../bpf/include -Wall -Werror -Wpadded -O2 -g
