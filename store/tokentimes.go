package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// maxTokenTimes bounds what DecodeTokenTimes accepts, so that a hostile blob cannot
// ask for more than a stream of DefaultMaxResponseBytes could have carried.
const maxTokenTimes = 1 << 22

// ErrTokenTimes reports a token_times blob that does not decode.
var ErrTokenTimes = errors.New("malformed token_times")

// EncodeTokenTimes packs arrival times (from the request's start, non-decreasing) as
// unsigned varints of microseconds between consecutive arrivals: one or two bytes per
// token at usual decode speeds. nil when there are none.
func EncodeTokenTimes(at []time.Duration) []byte {
	if len(at) == 0 {
		return nil
	}
	out := make([]byte, 0, 2*len(at)+2)
	var prev int64
	for _, d := range at {
		us := max(d.Microseconds(), prev) // a clock that stepped back counts as no gap
		out = binary.AppendUvarint(out, uint64(us-prev))
		prev = us
	}
	return out
}

// DecodeTokenTimes unpacks a blob of EncodeTokenTimes into arrival times from the
// request's start.
func DecodeTokenTimes(b []byte) ([]time.Duration, error) {
	var out []time.Duration
	var at uint64
	for i := 0; len(b) > 0; i++ {
		gap, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, fmt.Errorf("%w: byte %d of event %d", ErrTokenTimes, len(b), i)
		}
		if i >= maxTokenTimes || gap > uint64(24*time.Hour/time.Microsecond) || at+gap > uint64(24*time.Hour/time.Microsecond) {
			return nil, fmt.Errorf("%w: event %d past a day or past %d events", ErrTokenTimes, i, maxTokenTimes)
		}
		at += gap
		out = append(out, time.Duration(at)*time.Microsecond)
		b = b[n:]
	}
	return out, nil
}

// TokenGaps are the gaps between consecutive arrivals of a blob, in milliseconds: the
// inter-token latencies of one streamed reply.
func TokenGaps(b []byte) ([]float64, error) {
	at, err := DecodeTokenTimes(b)
	if err != nil || len(at) < 2 {
		return nil, err
	}
	gaps := make([]float64, len(at)-1)
	for i := 1; i < len(at); i++ {
		gaps[i-1] = float64(at[i]-at[i-1]) / float64(time.Millisecond)
	}
	return gaps, nil
}
