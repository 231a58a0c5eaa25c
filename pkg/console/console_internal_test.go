package console

import (
	"testing"
	"time"
)

func TestFormatUSD(t *testing.T) {
	tests := []struct {
		nano int64
		want string
	}{
		{0, "$0.00"},
		{1, "$0.000000001"},
		{10_000_000, "$0.01"},
		{1_234_500_000, "$1.2345"},
		{-2_500_000_000, "-$2.50"},
		{123_000_000_000, "$123.00"},
	}
	for _, tt := range tests {
		if got := formatUSD(tt.nano); got != tt.want {
			t.Errorf("formatUSD(%d) = %q, want %q", tt.nano, got, tt.want)
		}
	}
}

func TestParseExpiry(t *testing.T) {
	tests := []struct {
		in   string
		want time.Time
		err  bool
	}{
		{"", time.Time{}, false},
		{"2027-01-31", time.Date(2027, 1, 31, 23, 59, 59, 0, time.UTC), false},
		{"2027-01-31T08:30", time.Date(2027, 1, 31, 8, 30, 0, 0, time.UTC), false},
		{"2027-01-31T08:30:00+01:00", time.Date(2027, 1, 31, 7, 30, 0, 0, time.UTC), false},
		{"31/01/2027", time.Time{}, true},
		{"tomorrow", time.Time{}, true},
	}
	for _, tt := range tests {
		got, err := parseExpiry(tt.in)
		if (err != nil) != tt.err || !got.Equal(tt.want) {
			t.Errorf("parseExpiry(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}
