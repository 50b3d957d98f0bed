package workload

import (
	"context"
	"errors"
)

// Failure says how a request failed, in the terms a liveness watchdog decides on: an
// engine that says nothing (stalled), one that talks past the request's deadline (timed
// out), and one that answers at once with an error (failed fast) are three different
// faults.
type Failure string

// Failures a Turn reports.
const (
	// FailureNone: the request completed.
	FailureNone Failure = ""
	// FailureStalled: no stream event arrived within the stall timeout.
	FailureStalled Failure = "stalled"
	// FailureTimedOut: the request ran past the request timeout.
	FailureTimedOut Failure = "timed-out"
	// FailureFast: the engine answered with an HTTP error or a broken, incomplete or
	// empty reply, or the connection was refused or dropped.
	FailureFast Failure = "failed"
	// FailureCancelled: arbiter cancelled the request (an interrupt, or the run being
	// stopped); it says nothing about the engine.
	FailureCancelled Failure = "cancelled"
)

// failureOf classifies the error a request ended with; ctx is the request's caller's.
func failureOf(ctx context.Context, err error) Failure {
	switch {
	case err == nil:
		return FailureNone
	case ctx.Err() != nil:
		return FailureCancelled
	case errors.Is(err, ErrStalled):
		return FailureStalled
	case errors.Is(err, ErrRequestTimeout):
		return FailureTimedOut
	}
	return FailureFast
}
