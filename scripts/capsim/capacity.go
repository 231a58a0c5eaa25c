package main

import (
	"fmt"
	"io"
	"math"
	"time"
)

// Fleet describes a fleet for the capacity model (docs/design/scale.md):
// the load, the settings that shape the messages, and the unit costs
// measured on the project's machine.
type Fleet struct {
	Gateways int
	RPS      float64 // requests per second over the fleet

	// Settings, at their defaults unless given.
	FlushDelay   time.Duration // usage.flush_delay
	BatchSize    int           // usage.batch_size
	Replicas     int           // nats.replicas
	MaxAge       time.Duration // nats.max_age
	FoldInterval time.Duration // budget -fold-interval
	PresenceTTL  time.Duration // rate_limit.presence_ttl
	LoaderBatch  int           // analytics -batch-size (events per insert)
	Loaders      int           // analytics loaders inserting at once

	// Scope values touched within one fold (a day's active departments,
	// teams, projects, subjects and keys is an upper bound). Each is
	// written for three periods (day, month, all time), plus global.
	ActiveScopes int

	// Unit costs (measured; see docs/design/scale.md).
	EventBytes     float64 // one event in a compressed batch
	NATSCPUus      float64 // nats-server CPU per event stored, one replica
	FoldCPUus      float64 // budget consumer per event
	FoldMax        float64 // events/s one budget consumer folds
	LoaderCPUus    float64 // analytics loader per event
	LoaderMax      float64 // events/s one loader loads
	ClickHouseCPUs float64 // ClickHouse server per event inserted (µs)
	PartsPerInsert int     // usage_events + one per materialized view
	KVWrites       float64 // KV puts/s one nats-server takes on this machine (2 cores)
	KVDeliveries   float64 // watch deliveries/s one nats-server sends on this machine
	// NodeCores is the cores of one production node; figures measured on
	// this machine's 2 cores are scaled by NodeCores/2 (an assumption:
	// linear in cores).
	NodeCores int
}

// DefaultFleet is the fleet of issue #45: 200 gateways, 1 million
// requests a second, default settings and this machine's unit costs.
func DefaultFleet() Fleet {
	return Fleet{Gateways: 200, RPS: 1_000_000,
		FlushDelay: 20 * time.Millisecond, BatchSize: 256, Replicas: 3, MaxAge: 400 * 24 * time.Hour,
		FoldInterval: 200 * time.Millisecond, PresenceTTL: 15 * time.Second, LoaderBatch: 10_000, Loaders: 1,
		ActiveScopes: 20_000,
		EventBytes:   92, NATSCPUus: 2.3, FoldCPUus: 2.9, FoldMax: 350_000,
		LoaderCPUus: 11, LoaderMax: 25_000, ClickHouseCPUs: 22, PartsPerInsert: 13,
		KVWrites: 15_000, KVDeliveries: 48_000, NodeCores: 16}
}

// Load is one piece's figure in the capacity table.
type Load struct {
	Piece, Carries, Limit, Setting string
	Share                          float64 // load over what one unit (process, node) carries; >1 needs more units
}

// Capacity computes what each piece of the pipeline carries for f.
func Capacity(f Fleet) []Load {
	perGW := f.RPS / float64(f.Gateways)
	perBatch := math.Min(float64(f.BatchSize), math.Max(1, perGW*f.FlushDelay.Seconds()))
	msgs := f.RPS / perBatch
	bytes := f.RPS * f.EventBytes
	foldsPerSec := 1 / f.FoldInterval.Seconds()
	totalsPerFold := float64(3*f.ActiveScopes + 3)
	kvWrites := totalsPerFold * foldsPerSec
	inserts := f.RPS / float64(f.LoaderBatch)
	disk := bytes * f.MaxAge.Seconds()
	const nodeDisk = 4e12
	cores := float64(f.NodeCores)
	scale := cores / 2
	return []Load{
		{Piece: "JetStream usage stream",
			Carries: fmt.Sprintf("%.0f msgs/s of %.0f events, %.0f MB/s in, %.0f MB/s stored over %d replicas", msgs, perBatch, bytes/1e6, bytes*float64(f.Replicas)/1e6, f.Replicas),
			Limit:   fmt.Sprintf("%.1f cores per node at %.1f µs/event", f.RPS*f.NATSCPUus/1e6, f.NATSCPUus),
			Setting: "usage.flush_delay, usage.batch_size (events per message)",
			Share:   f.RPS * f.NATSCPUus / 1e6 / cores},
		{Piece: "JetStream disk (nats.max_age)",
			Carries: fmt.Sprintf("%.1f TB per node for %.0f days of events", disk/1e12, f.MaxAge.Hours()/24),
			Limit:   "a 4 TB volume",
			Setting: "nats.max_age (ClickHouse keeps the history)",
			Share:   disk / nodeDisk},
		{Piece: "Budget fold (one consumer)",
			Carries: fmt.Sprintf("%.0f events/s, %.1f cores at %.1f µs/event", f.RPS, f.RPS*f.FoldCPUus/1e6, f.FoldCPUus),
			Limit:   fmt.Sprintf("%.0f events/s per consumer", f.FoldMax),
			Setting: "none today: one consumer applies every event in stream order",
			Share:   f.RPS / f.FoldMax},
		{Piece: "KV writes of the folds",
			Carries: fmt.Sprintf("%.0f totals per fold, %.0f writes/s", totalsPerFold, kvWrites),
			Limit:   fmt.Sprintf("%.0f KV writes/s per bucket leader", f.KVWrites*scale),
			Setting: "budget -fold-interval (writes/s fall with it)",
			Share:   kvWrites / (f.KVWrites * scale)},
		{Piece: "Totals watched by every gateway",
			Carries: fmt.Sprintf("%.0f updates/s to each of %d gateways: %.1f million deliveries/s", kvWrites, f.Gateways, kvWrites*float64(f.Gateways)/1e6),
			Limit:   fmt.Sprintf("%.0f deliveries/s per node, %d nodes", f.KVDeliveries*scale, f.Replicas),
			Setting: "budget -fold-interval; watching only limited totals (not built)",
			Share:   kvWrites * float64(f.Gateways) / (f.KVDeliveries * scale * float64(f.Replicas))},
		{Piece: "Rate-limit presence",
			Carries: fmt.Sprintf("%.0f KV writes/s (one entry per gateway every %s)", float64(f.Gateways)/(f.PresenceTTL.Seconds()/3), f.PresenceTTL/3),
			Limit:   fmt.Sprintf("%.0f KV writes/s", f.KVWrites*scale),
			Setting: "rate_limit.presence_ttl",
			Share:   float64(f.Gateways) / (f.PresenceTTL.Seconds() / 3) / (f.KVWrites * scale)},
		{Piece: "Analytics loaders",
			Carries: fmt.Sprintf("%.0f events/s, %.1f cores at %.0f µs/event", f.RPS, f.RPS*f.LoaderCPUus/1e6, f.LoaderCPUus),
			Limit:   fmt.Sprintf("%.0f events/s per loader, %d loading", f.LoaderMax, f.Loaders),
			Setting: "more loaders (scale-out), analytics -batch-size",
			Share:   f.RPS / (f.LoaderMax * float64(f.Loaders))},
		{Piece: "ClickHouse inserts",
			Carries: fmt.Sprintf("%.0f rows/s, %.0f inserts/s, %.0f parts/s", f.RPS, inserts, inserts*float64(f.PartsPerInsert)),
			Limit:   fmt.Sprintf("%.0f cores at %.0f µs/event (18.16), %d per node; about 10 parts/s per table", f.RPS*f.ClickHouseCPUs/1e6, f.ClickHouseCPUs, f.NodeCores),
			Setting: "analytics -batch-size (events per insert), shards",
			Share:   math.Max(f.RPS*f.ClickHouseCPUs/1e6/cores, inserts/10)},
	}
}

// printCapacity writes the capacity table of f as Markdown.
func printCapacity(w io.Writer, f Fleet) {
	fmt.Fprintf(w, "%d gateways, %.0f req/s (%.0f each)\n\n", f.Gateways, f.RPS, f.RPS/float64(f.Gateways))
	fmt.Fprintln(w, "| piece | carries | one unit's limit | load / one unit | setting that moves it |")
	fmt.Fprintln(w, "|---|---|---|---:|---|")
	for _, l := range Capacity(f) {
		fmt.Fprintf(w, "| %s | %s | %s | %.2f | %s |\n", l.Piece, l.Carries, l.Limit, l.Share, l.Setting)
	}
}
