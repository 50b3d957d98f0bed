//go:build race

package main

// raceEnabled: the race detector slows the in-process server several times over, which
// lowers the load its fault model sees; calibration figures are taken without it.
const raceEnabled = true
