// Package repocheck holds tests of the repository itself (what its comments, examples and
// documents cite); it has no code of its own.
package repocheck
