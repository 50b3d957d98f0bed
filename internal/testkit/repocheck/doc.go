// Package repocheck holds tests of the repository itself: what its comments, examples and
// documents cite, who may import whom (docs/ARCHITECTURE.md), and that make fuzz runs
// every fuzz target; it has no code of its own.
package repocheck
