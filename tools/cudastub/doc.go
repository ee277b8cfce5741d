// Package cudastub holds the C stand-ins for the CUDA driver library
// (libcuda.so.1) and runtime library (libcudart.so.12), and the driver
// program cudastub-driver that calls them a known number of times. They let
// the CUDA uprobes and the simulated server run without a GPU. The C sources
// build with make (see README.md); this package only holds their tests.
package cudastub
