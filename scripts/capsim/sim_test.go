package main

import "testing"

// The model keeps the lease protocol's promises whatever the fleet: no
// total's admitted spend passes its limit, and a lone gateway, which may
// take all that is free, refuses nothing while its total has room.
func TestRunKeepsLimits(t *testing.T) {
	for _, gateways := range []int{1, 4, 16} {
		p := defaults()
		p.Gateways, p.Totals, p.RPS, p.Seconds = gateways, 20, 20_000, 2
		r := Run(p)
		if r.Requests == 0 || r.Admitted+r.Refused > r.Requests { // the rest still wait at the end
			t.Fatalf("%d gateways: %d requests, %d admitted, %d refused", gateways, r.Requests, r.Admitted, r.Refused)
		}
		if r.OverLimitNano != 0 {
			t.Errorf("%d gateways: a total went %d nano-USD over its limit", gateways, r.OverLimitNano)
		}
		if r.AtLimit == 0 {
			t.Errorf("%d gateways: no total reached its limit at fill %.1f: the run did not test refusals", gateways, p.Fill)
		}
		if gateways == 1 && r.RefusedWithHeadroom != 0 {
			t.Errorf("one gateway refused %d requests with headroom left", r.RefusedWithHeadroom)
		}
	}
}

// More gateways on the same totals never make fewer lease writes: each
// holds a smaller share and refills more often (the shape of the table in
// docs/design/scale.md).
func TestWritesGrowWithGateways(t *testing.T) {
	var last int64 = -1
	for _, gateways := range []int{1, 4, 16} {
		p := defaults()
		p.Gateways, p.Totals, p.RPS, p.Seconds, p.Fill = gateways, 20, 20_000, 2, 2 // limits never reached
		r := Run(p)
		if r.Writes <= last {
			t.Errorf("%d gateways: %d lease writes, not more than %d with fewer", gateways, r.Writes, last)
		}
		last = r.Writes
	}
}
