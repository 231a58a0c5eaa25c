package providers

import "testing"

// TestCount: a token count is a JSON number that is a non-negative integer
// below 2^64 written plainly; anything else is not one, whatever it would
// round or wrap to.
func TestCount(t *testing.T) {
	tests := []struct {
		raw  string
		want uint64
		ok   bool
	}{
		{"0", 0, true},
		{"216", 216, true},
		{"18446744073709551615", 1<<64 - 1, true},
		{"18446744073709551616", 0, false}, // 2^64 would wrap to 0
		{"20000000000000000000", 0, false},
		{"-1", 0, false},
		{"2.7", 0, false},
		{"1e3", 0, false},
		{`"12"`, 0, false},
		{"null", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		if n, ok := Count(tt.raw); n != tt.want || ok != tt.ok {
			t.Errorf("Count(%q) = %d, %v; want %d, %v", tt.raw, n, ok, tt.want, tt.ok)
		}
	}
}
