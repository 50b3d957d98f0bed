package store

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestTokenTimesRoundTrip(t *testing.T) {
	at := []time.Duration{100 * time.Millisecond, 120 * time.Millisecond, 120 * time.Millisecond,
		141*time.Millisecond + 500*time.Microsecond, 10 * time.Second}
	b := EncodeTokenTimes(at)
	if len(b) > 3*len(at) {
		t.Errorf("%d times take %d bytes", len(at), len(b))
	}
	got, err := DecodeTokenTimes(b)
	if err != nil || !reflect.DeepEqual(got, at) {
		t.Fatalf("round trip: %v %v, want %v", got, err, at)
	}
	gaps, err := AppendTokenGaps(nil, b)
	if err != nil || !reflect.DeepEqual(gaps, []float64{20, 0, 21.5, 9858.5}) {
		t.Fatalf("gaps %v %v", gaps, err)
	}
	if EncodeTokenTimes(nil) != nil {
		t.Error("no times should encode as NULL")
	}
	// A clock step backwards is a zero gap, not a wrap-around.
	got, _ = DecodeTokenTimes(EncodeTokenTimes([]time.Duration{5 * time.Millisecond, 3 * time.Millisecond}))
	if got[1] != 5*time.Millisecond {
		t.Errorf("stepped-back clock: %v", got)
	}
	if _, err := DecodeTokenTimes([]byte{0x80}); !errors.Is(err, ErrTokenTimes) {
		t.Errorf("truncated varint: %v", err)
	}
}

func FuzzTokenTimes(f *testing.F) {
	f.Add(EncodeTokenTimes([]time.Duration{time.Millisecond, 21 * time.Millisecond}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		at, err := DecodeTokenTimes(b)
		// The gaps read straight from the varints are the differences of the decoded
		// times, appended after what dst held; a blob that does not decode leaves dst.
		prefix := []float64{-1}
		gaps, gapErr := AppendTokenGaps(prefix, b)
		if (err == nil) != (gapErr == nil) {
			t.Fatalf("decode: %v, gaps: %v", err, gapErr)
		}
		want := append([]float64(nil), prefix...)
		for i := 1; i < len(at); i++ {
			want = append(want, float64(at[i]-at[i-1])/float64(time.Millisecond))
		}
		if !reflect.DeepEqual(gaps, want) {
			t.Fatalf("gaps %v, want %v (times %v)", gaps, want, at)
		}
		if err != nil {
			return
		}
		for i := 1; i < len(at); i++ {
			if at[i] < at[i-1] {
				t.Fatalf("times go backwards: %v", at)
			}
		}
		again, err := DecodeTokenTimes(EncodeTokenTimes(at))
		if err != nil || !reflect.DeepEqual(again, at) && len(at) > 0 {
			t.Fatalf("re-encoding %v: %v %v", at, again, err)
		}
	})
}

// The writer stores a turn's token times as the blob the verdict reads back, and holds
// at most MaxQueueBytes of texts queued: a sender past it waits for a batch to be
// written, and the turns all arrive.
func TestWriterStoresTokenTimesAndBoundsItsQueue(t *testing.T) {
	s := newStore(t, Options{})
	exp, arm, run := seedExperiment(t, s)
	w := s.NewWriter(WriterOptions{MaxQueueBytes: 100 << 10, MaxBatch: 4})
	raw := strings.Repeat("x", 40<<10)
	at := []time.Duration{100 * time.Millisecond, 120 * time.Millisecond, 141 * time.Millisecond}
	var peak int64
	for i := range 20 {
		w.Turn(Turn{ExperimentID: exp, RunID: run, ArmID: arm, Session: i, StatusCode: 200, Started: time.Now(),
			Request: "{}", Response: "{}", Raw: raw, TokenTimes: at})
		w.queueMu.Lock()
		peak = max(peak, w.queued)
		w.queueMu.Unlock()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if peak > 100<<10 {
		t.Errorf("queue held %d bytes, bound 100 KiB", peak)
	}
	if w.queued != 0 {
		t.Errorf("%d bytes still counted after Close", w.queued)
	}
	var blobs [][]byte
	if err := s.DB().Select(&blobs, "SELECT token_times FROM turns"); err != nil || len(blobs) != 20 {
		t.Fatalf("%d turns: %v", len(blobs), err)
	}
	got, err := DecodeTokenTimes(blobs[0])
	if err != nil || !reflect.DeepEqual(got, at) {
		t.Errorf("stored token times %v %v, want %v", got, err, at)
	}
}
