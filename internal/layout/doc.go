// Package layout holds the test that keeps the package map of DESIGN.md
// true: which bpfbench packages each package may import. It has no code.
package layout
