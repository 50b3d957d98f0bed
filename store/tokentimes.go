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
		gap, n, err := nextTokenGap(b, i, at)
		if err != nil {
			return nil, err
		}
		at += gap
		out = append(out, time.Duration(at)*time.Microsecond)
		b = b[n:]
	}
	return out, nil
}

// nextTokenGap reads the varint that starts b, event i's gap in microseconds after the
// arrival at, and its length; an error for one that does not decode, or that would
// make the stream longer than a day or than maxTokenTimes events.
func nextTokenGap(b []byte, i int, at uint64) (uint64, int, error) {
	gap, n := binary.Uvarint(b)
	if n <= 0 || i >= maxTokenTimes || gap > maxTokenMicros || at+gap > maxTokenMicros {
		return 0, 0, badTokenGap(len(b), i, n)
	}
	return gap, n, nil
}

// maxTokenMicros is a day, the longest stream a blob may describe.
const maxTokenMicros = uint64(24 * time.Hour / time.Microsecond)

// badTokenGap says why event i, at len bytes from the blob's end, does not decode.
func badTokenGap(len, i, n int) error {
	if n <= 0 {
		return fmt.Errorf("%w: byte %d of event %d", ErrTokenTimes, len, i)
	}
	return fmt.Errorf("%w: event %d past a day or past %d events", ErrTokenTimes, i, maxTokenTimes)
}

// AppendTokenGaps appends to dst the gaps between consecutive arrivals of a blob, in
// milliseconds (the inter-token latencies of one streamed reply), read straight from
// its varints: the gaps it encodes, after the first arrival's. For a blob that does not
// decode it returns dst unchanged, with DecodeTokenTimes's error.
func AppendTokenGaps(dst []float64, b []byte) ([]float64, error) {
	start := len(dst)
	var at uint64
	for i := 0; len(b) > 0; i++ {
		gap, n, err := nextTokenGap(b, i, at)
		if err != nil {
			return dst[:start], err
		}
		at += gap
		if i > 0 {
			dst = append(dst, float64(time.Duration(gap)*time.Microsecond)/float64(time.Millisecond))
		}
		b = b[n:]
	}
	return dst, nil
}
