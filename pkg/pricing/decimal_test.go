package pricing

import (
	"errors"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"testing"
)

func TestParseUSD(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    int64
		wantErr error
	}{
		{name: "zero", in: "0", want: 0},
		{name: "integer", in: "250", want: 250_000_000_000},
		{name: "cents", in: "2.50", want: 2_500_000_000},
		{name: "tenth of a cent", in: "0.075", want: 75_000_000},
		{name: "one nano", in: "0.000000001", want: 1},
		{name: "nine decimals", in: "1.123456789", want: 1_123_456_789},
		{name: "leading zeros", in: "007.5", want: 7_500_000_000},
		{name: "max int64", in: "9223372036.854775807", want: math.MaxInt64},
		{name: "above max int64", in: "9223372036.854775808", wantErr: strconv.ErrRange},
		{name: "whole part too large", in: "9223372037", wantErr: strconv.ErrRange},
		{name: "huge", in: "99999999999999999999999", wantErr: strconv.ErrRange},
		{name: "empty", in: "", wantErr: errSyntax},
		{name: "negative", in: "-1", wantErr: errSyntax},
		{name: "negative zero", in: "-0", wantErr: errSyntax},
		{name: "plus sign", in: "+1", wantErr: errSyntax},
		{name: "ten decimals", in: "1.0000000001", wantErr: errSyntax},
		{name: "trailing dot", in: "1.", wantErr: errSyntax},
		{name: "leading dot", in: ".5", wantErr: errSyntax},
		{name: "exponent", in: "1e3", wantErr: errSyntax},
		{name: "space", in: " 1", wantErr: errSyntax},
		{name: "comma", in: "1,5", wantErr: errSyntax},
		{name: "two dots", in: "1.2.3", wantErr: errSyntax},
		{name: "underscore", in: "1_000", wantErr: errSyntax},
		{name: "hex", in: "0x10", wantErr: errSyntax},
		{name: "non-ascii digit", in: "١", wantErr: errSyntax},
		{name: "word", in: "free", wantErr: errSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseUSD(tt.in)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ParseUSD(%q) = %d, %v; want error %v", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseUSD(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestFormatUSD(t *testing.T) {
	tests := []struct {
		name string
		in   int64
		want string
	}{
		{name: "zero", in: 0, want: "0.00"},
		{name: "cents", in: 2_500_000_000, want: "2.50"},
		{name: "whole", in: 250_000_000_000, want: "250.00"},
		{name: "fraction of a cent", in: 75_000_000, want: "0.075"},
		{name: "one nano", in: 1, want: "0.000000001"},
		{name: "negative", in: -1_230_000_000, want: "-1.23"},
		{name: "max", in: math.MaxInt64, want: "9223372036.854775807"},
		{name: "min", in: math.MinInt64, want: "-9223372036.854775808"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FormatUSD(tt.in); got != tt.want {
				t.Errorf("FormatUSD(%d) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// plainDecimal is the syntax ParseUSD accepts.
var plainDecimal = regexp.MustCompile(`^[0-9]+(\.[0-9]{1,9})?$`)

// FuzzParseUSD checks ParseUSD against math/big: it must accept exactly the
// plain decimals that fit in int64 nano-USD, and return their exact value.
func FuzzParseUSD(f *testing.F) {
	for _, s := range []string{"0", "2.50", "0.000000001", "9223372036.854775807",
		"9223372036.854775808", "-1", "1.", ".5", "1e3", "1.0000000001", "abc", ""} {
		f.Add(s)
	}
	maxNano := big.NewRat(math.MaxInt64, 1)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseUSD(s)

		var want *big.Rat
		if plainDecimal.MatchString(s) {
			r, ok := new(big.Rat).SetString(s)
			if !ok {
				t.Fatalf("big.Rat rejects %q", s)
			}
			want = r.Mul(r, big.NewRat(NanoPerUSD, 1))
			if want.Cmp(maxNano) > 0 {
				want = nil // out of range
			}
		}
		if want == nil {
			if err == nil {
				t.Fatalf("ParseUSD(%q) = %d, want an error", s, got)
			}
			return
		}
		if err != nil {
			t.Fatalf("ParseUSD(%q): %v, want %s", s, err, want.RatString())
		}
		if !want.IsInt() || want.Num().Int64() != got {
			t.Fatalf("ParseUSD(%q) = %d, want %s", s, got, want.RatString())
		}
		back, err := ParseUSD(FormatUSD(got))
		if err != nil || back != got {
			t.Fatalf("ParseUSD(FormatUSD(%d)) = %d, %v", got, back, err)
		}
	})
}
