package verdict

import (
	"context"
	"math"

	"github.com/jmoiron/sqlx"
)

// GroupSpread is how much the launches of one group (a throughput phase) differed in tok/s
// per request within their arms, and how many launches showed it.
type GroupSpread struct {
	Group    string
	Spread   Spread
	Launches int
}

// SpeedSpreads measures, group by group, how much the launches of experiment id differed
// in tok/s per request within each arm: the pooled standard deviation of the logs of the
// launches' medians (near enough their coefficient of variation), with its upper bound at
// stats.FloorConf. The arms' own differences are not in it, so an A/B experiment measures
// it as well as an A/A one. `arbiter plan` plans a speed claim's launches from it. Groups
// whose launches were too few to differ (one a side) are left out.
func SpeedSpreads(ctx context.Context, db *sqlx.DB, id int64) ([]GroupSpread, error) {
	v, err := BuildWith(ctx, db, id, Options{NoFloor: true})
	if err != nil {
		return nil, err
	}
	if v.Outcomes == nil {
		return nil, nil
	}
	var groups []string
	for _, g := range v.Outcomes.Groups {
		groups = append(groups, g.Name)
	}
	samples := v.launchSamples()
	f := measureFloor(samples, groups)
	var out []GroupSpread
	for _, g := range groups {
		sp, ok := f.Speed[g][MetricThroughput]
		if !ok {
			continue
		}
		n := 0
		for _, arm := range samples {
			n += len(logMedians(arm, g, MetricThroughput))
		}
		out = append(out, GroupSpread{Group: g, Spread: sp, Launches: n})
	}
	return out, nil
}

// SpeedSpread is the spread of tok/s per request the floor measured in group.
func (f *Floor) SpeedSpread(group string) (Spread, bool) {
	if !f.Used() {
		return Spread{}, false
	}
	sp, ok := f.Speed[group][MetricThroughput]
	return sp, ok && sp.Upper > 0
}

// CorruptionSpread measures how much the launches of experiment id differed in
// corruption within each arm: the intra-launch correlation of the arms whose launches
// show one (stats.LaunchICC; an arm with no corrupted session shows none), averaged over
// them, and the launches it rests on. NaN when no arm shows one. `arbiter plan` plans
// with it where the spec declares no launch_icc.
func CorruptionSpread(ctx context.Context, db *sqlx.DB, id int64) (icc float64, launches int, err error) {
	v, err := BuildWith(ctx, db, id, Options{NoFloor: true})
	if err != nil {
		return math.NaN(), 0, err
	}
	samples := v.launchSamples()
	for _, arm := range samples {
		for _, s := range arm {
			if s.sessions > 0 {
				launches++
			}
		}
	}
	return pooledICC(samples...), launches, nil
}
