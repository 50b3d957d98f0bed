module github.com/arbiterlab/arbiter/bench

go 1.26.8

require (
	github.com/arbiterlab/arbiter v0.0.0-00010101000000-000000000000
	github.com/tsenart/vegeta/v12 v12.13.0
)

require (
	github.com/goccy/go-yaml v1.19.0 // indirect
	github.com/influxdata/tdigest v0.0.1 // indirect
	github.com/josharian/intern v1.0.0 // indirect
	github.com/mailru/easyjson v0.7.7 // indirect
	github.com/rs/dnscache v0.0.0-20230804202142-fc85eb664529 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)

// The arbiter of this checkout, not a published one.
replace github.com/arbiterlab/arbiter => ../
