// Package layout holds the tests that keep the code's shape: the package
// map of DESIGN.md (which bpfbench packages each package may import), no
// bare skips in tests, links that stay in the repository, test helpers
// imported by tests only, and no function over 120 lines. It has no code.
package layout
