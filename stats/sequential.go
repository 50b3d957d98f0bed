package stats

// LookCounts are the cumulative counts of both arms at one look: corrupted sessions and
// sessions completed so far. A bisection's step looks after every pair of launches
// (bisect.go); the verdict's sequential looks are on launches (launch.go).
type LookCounts struct {
	EventsA, SessionsA int
	EventsB, SessionsB int
}
