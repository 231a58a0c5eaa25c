package budget

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/pkg/auth"
	"github.com/tollgate/tollgate/pkg/config"
)

func TestParseUSD(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "0", want: 0},
		{in: "250", want: 250_000_000_000},
		{in: "12.50", want: 12_500_000_000},
		{in: "0.000000001", want: 1},
		{in: "9223372036.854775807", want: math.MaxInt64},
		{in: "9223372036.854775808", wantErr: true},
		{in: "9223372037", wantErr: true},
		{in: "0.0000000001", wantErr: true},
		{in: "", wantErr: true},
		{in: ".5", wantErr: true},
		{in: "5.", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "1e3", wantErr: true},
		{in: " 1", wantErr: true},
		{in: "1,5", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseUSD(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("parseUSD(%q) = %d, %v; want %d, err %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestUSDFloatToNano(t *testing.T) {
	tests := []struct {
		name    string
		in      float64
		want    int64
		wantErr bool
	}{
		{name: "whole", in: 250, want: 250_000_000_000},
		{name: "half", in: 12.5, want: 12_500_000_000},
		{name: "tenth is exact", in: 0.1, want: 100_000_000},
		{name: "cents", in: 19.99, want: 19_990_000_000},
		{name: "rounded to nano", in: 0.0000000016, want: 2},
		{name: "zero", in: 0, want: 0},
		{name: "negative", in: -1, wantErr: true},
		{name: "nan", in: math.NaN(), wantErr: true},
		{name: "inf", in: math.Inf(1), wantErr: true},
		{name: "too large", in: 1e10, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := USDFloatToNano(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("USDFloatToNano(%v) = %d, %v; want %d, err %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseLimits(t *testing.T) {
	tests := []struct {
		name    string
		in      []config.BudgetLimit
		want    []Limit
		wantErr string
	}{
		{
			name: "valid with defaults",
			in: []config.BudgetLimit{
				{Scope: "dept", Value: "finance", AmountUSD: "250", Period: "month"},
				{Scope: "team", Value: "*", AmountUSD: "12.50"},
				{Scope: "global", Value: "*", AmountUSD: "1000", Period: "total"},
			},
			want: []Limit{
				{Scope: ScopeDept, Value: "finance", Period: PeriodMonth, AmountNano: 250_000_000_000},
				{Scope: ScopeTeam, Value: "*", Period: PeriodMonth, AmountNano: 12_500_000_000},
				{Scope: ScopeGlobal, Value: "", Period: PeriodTotal, AmountNano: 1_000_000_000_000},
			},
		},
		{name: "unknown scope", in: []config.BudgetLimit{{Scope: "org", Value: "x", AmountUSD: "1"}}, wantErr: "unknown budget scope"},
		{name: "unknown period", in: []config.BudgetLimit{{Scope: "dept", Value: "x", AmountUSD: "1", Period: "week"}}, wantErr: "unknown budget period"},
		{name: "missing value", in: []config.BudgetLimit{{Scope: "dept", AmountUSD: "1"}}, wantErr: "needs a value"},
		{name: "float amount", in: []config.BudgetLimit{{Scope: "dept", Value: "x", AmountUSD: "1e3"}}, wantErr: "parse amount"},
		{
			name: "team and project values name their department",
			in: []config.BudgetLimit{
				{Scope: "team", Value: "research/ml", AmountUSD: "5", Period: "day"},
				{Scope: "team", Value: "*/ml", AmountUSD: "3", Period: "day"},
				{Scope: "project", Value: "/p1", AmountUSD: "1", Period: "day"},
				{Scope: "project", Value: "a%2Fb/x/y", AmountUSD: "1", Period: "day"},
			},
			want: []Limit{
				{Scope: ScopeTeam, Value: "research/ml", Period: PeriodDay, AmountNano: 5 * NanoPerUSD},
				{Scope: ScopeTeam, Value: "*/ml", Period: PeriodDay, AmountNano: 3 * NanoPerUSD},
				{Scope: ScopeProject, Value: "/p1", Period: PeriodDay, AmountNano: NanoPerUSD},
				{Scope: ScopeProject, Value: "a%2Fb/x/y", Period: PeriodDay, AmountNano: NanoPerUSD},
			},
		},
		{name: "bare team refused, naming the new syntax", in: []config.BudgetLimit{{Scope: "team", Value: "ml", AmountUSD: "1"}},
			wantErr: `budgets[0]: team value "ml" must name its department: write "<dept>/ml" for team ml of one department, "*/ml" for team ml of every department, or "*" for every team`},
		{name: "bare project refused", in: []config.BudgetLimit{{Scope: "project", Value: "p1", AmountUSD: "1"}}, wantErr: `"*/p1"`},
		{name: "each team of one dept", in: []config.BudgetLimit{{Scope: "team", Value: "research/*", AmountUSD: "1"}}, wantErr: "not supported"},
		{name: "no name", in: []config.BudgetLimit{{Scope: "team", Value: "research/", AmountUSD: "1"}}, wantErr: "no team name"},
		{name: "raw star in a dept", in: []config.BudgetLimit{{Scope: "team", Value: "r*/ml", AmountUSD: "1"}}, wantErr: "%2A"},
		{name: "bad escape in a dept", in: []config.BudgetLimit{{Scope: "team", Value: "r%41/ml", AmountUSD: "1"}}, wantErr: "%25"},
		{name: "dept values are not qualified", in: []config.BudgetLimit{{Scope: "dept", Value: "a/b", AmountUSD: "1"}},
			want: []Limit{{Scope: ScopeDept, Value: "a/b", Period: PeriodMonth, AmountNano: NanoPerUSD}}},
		{name: "duplicate", in: []config.BudgetLimit{
			{Scope: "dept", Value: "x", AmountUSD: "1", Period: "day"},
			{Scope: "dept", Value: "x", AmountUSD: "2", Period: "day"},
		}, wantErr: "duplicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLimits(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("[%d] = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestFromClaims(t *testing.T) {
	got, err := FromClaims([]auth.BudgetClaim{
		{Scope: "team", Value: "", AmountUSD: 0.1, Period: "day"},
		{Scope: "key", Value: "k1", AmountUSD: 5},
		{Scope: "team", Value: "ml", AmountUSD: 1},        // minted before values were qualified
		{Scope: "project", Value: "eng/p1", AmountUSD: 2}, // qualified
		{Scope: "subject", Value: "a/b", AmountUSD: 3},    // not a qualified scope
		{Scope: "project", Value: "*", AmountUSD: 4},      // own project
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []Limit{
		{Scope: ScopeTeam, Value: Star, Period: PeriodDay, AmountNano: 100_000_000},
		{Scope: ScopeKey, Value: "k1", Period: PeriodMonth, AmountNano: 5_000_000_000},
		{Scope: ScopeTeam, Value: "*/ml", Period: PeriodMonth, AmountNano: 1_000_000_000},
		{Scope: ScopeProject, Value: "eng/p1", Period: PeriodMonth, AmountNano: 2_000_000_000},
		{Scope: ScopeSubject, Value: "a/b", Period: PeriodMonth, AmountNano: 3_000_000_000},
		{Scope: ScopeProject, Value: Star, Period: PeriodMonth, AmountNano: 4_000_000_000},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := FromClaims([]auth.BudgetClaim{{Scope: "team", AmountUSD: -1}}); err == nil {
		t.Error("negative claim accepted")
	}
}

func TestValidateHierarchy(t *testing.T) {
	usd := func(n int64) int64 { return n * NanoPerUSD }
	tests := []struct {
		name       string
		limits     []Limit
		overcommit bool
		wantErr    bool
	}{
		{name: "empty", limits: nil},
		{name: "depts fit under global", limits: []Limit{
			{Scope: ScopeGlobal, Period: PeriodMonth, AmountNano: usd(1000)},
			{Scope: ScopeDept, Value: "a", Period: PeriodMonth, AmountNano: usd(600)},
			{Scope: ScopeDept, Value: "b", Period: PeriodMonth, AmountNano: usd(400)},
		}},
		{name: "depts sum above global", limits: []Limit{
			{Scope: ScopeGlobal, Period: PeriodMonth, AmountNano: usd(1000)},
			{Scope: ScopeDept, Value: "a", Period: PeriodMonth, AmountNano: usd(600)},
			{Scope: ScopeDept, Value: "b", Period: PeriodMonth, AmountNano: usd(401)},
		}, wantErr: true},
		{name: "overcommit allowed", overcommit: true, limits: []Limit{
			{Scope: ScopeGlobal, Period: PeriodMonth, AmountNano: usd(1000)},
			{Scope: ScopeDept, Value: "a", Period: PeriodMonth, AmountNano: usd(2000)},
		}},
		{name: "other periods are not compared", limits: []Limit{
			{Scope: ScopeGlobal, Period: PeriodDay, AmountNano: usd(10)},
			{Scope: ScopeDept, Value: "a", Period: PeriodMonth, AmountNano: usd(2000)},
		}},
		{name: "team star above an explicit dept", limits: []Limit{
			{Scope: ScopeDept, Value: "a", Period: PeriodDay, AmountNano: usd(100)},
			{Scope: ScopeTeam, Value: Star, Period: PeriodDay, AmountNano: usd(150)},
		}, wantErr: true},
		{name: "explicit key above a subject star", limits: []Limit{
			{Scope: ScopeSubject, Value: Star, Period: PeriodDay, AmountNano: usd(10)},
			{Scope: ScopeKey, Value: "k", Period: PeriodDay, AmountNano: usd(11)},
		}, wantErr: true},
		{name: "explicit team and explicit dept are unrelated", limits: []Limit{
			{Scope: ScopeDept, Value: "a", Period: PeriodDay, AmountNano: usd(100)},
			{Scope: ScopeTeam, Value: "t", Period: PeriodDay, AmountNano: usd(150)},
		}},
		{name: "explicit team above its own dept", limits: []Limit{
			{Scope: ScopeDept, Value: "research", Period: PeriodDay, AmountNano: usd(100)},
			{Scope: ScopeTeam, Value: "research/ml", Period: PeriodDay, AmountNano: usd(101)},
		}, wantErr: true},
		{name: "teams of a dept sum above it", limits: []Limit{
			{Scope: ScopeDept, Value: "research", Period: PeriodDay, AmountNano: usd(100)},
			{Scope: ScopeTeam, Value: "research/ml", Period: PeriodDay, AmountNano: usd(60)},
			{Scope: ScopeTeam, Value: "research/web", Period: PeriodDay, AmountNano: usd(41)},
		}, wantErr: true},
		{name: "projects of a dept sum above it", limits: []Limit{
			{Scope: ScopeDept, Value: "research", Period: PeriodDay, AmountNano: usd(100)},
			{Scope: ScopeProject, Value: "research/p1", Period: PeriodDay, AmountNano: usd(60)},
			{Scope: ScopeProject, Value: "research/p2", Period: PeriodDay, AmountNano: usd(41)},
		}, wantErr: true},
		{name: "team of another dept is not summed", limits: []Limit{
			{Scope: ScopeDept, Value: "research", Period: PeriodDay, AmountNano: usd(100)},
			{Scope: ScopeTeam, Value: "research/ml", Period: PeriodDay, AmountNano: usd(60)},
			{Scope: ScopeTeam, Value: "finance/ml", Period: PeriodDay, AmountNano: usd(60)},
		}},
		{name: "any-dept team above an explicit dept", limits: []Limit{
			{Scope: ScopeDept, Value: "research", Period: PeriodDay, AmountNano: usd(100)},
			{Scope: ScopeTeam, Value: "*/ml", Period: PeriodDay, AmountNano: usd(150)},
		}, wantErr: true},
		{name: "any-dept teams are not summed under global", limits: []Limit{
			{Scope: ScopeGlobal, Period: PeriodDay, AmountNano: usd(100)},
			{Scope: ScopeTeam, Value: "*/ml", Period: PeriodDay, AmountNano: usd(60)},
			{Scope: ScopeTeam, Value: "*/web", Period: PeriodDay, AmountNano: usd(60)},
		}},
		{name: "star below global", limits: []Limit{
			{Scope: ScopeGlobal, Period: PeriodTotal, AmountNano: usd(100)},
			{Scope: ScopeProject, Value: Star, Period: PeriodTotal, AmountNano: usd(100)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateHierarchy(tt.limits, tt.overcommit)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func TestKeys(t *testing.T) {
	day := func(y int, m time.Month, d int) int32 { return int32(utc(y, m, d, 0, 0, 0).Unix() / 86400) }
	tests := []struct {
		name string
		id   TotalID
		key  string
	}{
		{name: "dept month", id: TotalID{Scope: ScopeDept, Value: "finance", Period: PeriodMonth, Start: 2026*12 + 10}, key: "dept.finance.month.2026-11"},
		{name: "team day", id: TotalID{Scope: ScopeTeam, Value: "ml", Period: PeriodDay, Start: day(2026, 11, 30)}, key: "team.ml.day.2026-11-30"},
		{name: "global total", id: TotalID{Scope: ScopeGlobal, Period: PeriodTotal}, key: "global._.total._"},
		{name: "escaped", id: TotalID{Scope: ScopeKey, Value: "a.b/c=d é*", Period: PeriodTotal}, key: "key.a=2Eb=2Fc=3Dd=20=C3=A9=2A.total._"},
		{name: "plain punctuation kept", id: TotalID{Scope: ScopeSubject, Value: "user_1-x", Period: PeriodDay, Start: day(1999, 12, 31)}, key: "subject.user_1-x.day.1999-12-31"},
		{name: "before 1970", id: TotalID{Scope: ScopeDept, Value: "x", Period: PeriodDay, Start: day(1969, 12, 31)}, key: "dept.x.day.1969-12-31"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.id.Key(); got != tt.key {
				t.Fatalf("Key() = %q, want %q", got, tt.key)
			}
			back, err := ParseKey(tt.key)
			if err != nil || back != tt.id {
				t.Fatalf("ParseKey(%q) = %+v, %v; want %+v", tt.key, back, err, tt.id)
			}
		})
	}
	for _, bad := range []string{"dept.x.month", "org.x.total._", "dept..total._", "dept.a=2e.total._", "dept.=41.total._",
		"dept.a=4.total._", "global.x.total._", "dept.x.total.2026", "dept.x.day.2026-13-01", "dept.a b.total._"} {
		t.Run("reject "+bad, func(t *testing.T) {
			if id, err := ParseKey(bad); err == nil {
				t.Fatalf("ParseKey(%q) = %+v, want error", bad, id)
			}
		})
	}
}

func TestPeriodStart(t *testing.T) {
	tests := []struct {
		name      string
		at        time.Time
		day, mnth string
	}{
		{name: "last second of a month", at: utc(2026, 11, 30, 23, 59, 59), day: "2026-11-30", mnth: "2026-11"},
		{name: "first second of the next", at: utc(2026, 12, 1, 0, 0, 1), day: "2026-12-01", mnth: "2026-12"},
		{name: "last nanosecond of a year", at: utc(2026, 12, 31, 23, 59, 59).Add(999_999_999), day: "2026-12-31", mnth: "2026-12"},
		{name: "other zone is converted", at: time.Date(2026, 12, 1, 0, 30, 0, 0, time.FixedZone("CET", 3600)), day: "2026-11-30", mnth: "2026-11"},
		{name: "before the epoch", at: utc(1969, 12, 31, 23, 0, 0), day: "1969-12-31", mnth: "1969-12"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := periodStarts(tt.at.UnixNano())
			d := TotalID{Period: PeriodDay, Start: s[PeriodDay]}.PeriodStart()
			m := TotalID{Period: PeriodMonth, Start: s[PeriodMonth]}.PeriodStart()
			if d != tt.day || m != tt.mnth {
				t.Fatalf("got %s, %s; want %s, %s", d, m, tt.day, tt.mnth)
			}
		})
	}
}

func FuzzKeyRoundTrip(f *testing.F) {
	for _, s := range []string{"finance", "a.b", "=", "é", "_", "-", "research/ml", "/ml", "a%2Fb/c", "*/ml", "%2A/x/y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if v == "" {
			return
		}
		id := TotalID{Scope: ScopeTeam, Value: v, Period: PeriodTotal}
		k := id.Key()
		for i := 0; i < len(k); i++ {
			c := k[i]
			if !(plainByte(c) || c == '.' || c == '=') {
				t.Fatalf("key %q has byte %q", k, c)
			}
		}
		back, err := ParseKey(k)
		if err != nil || back != id {
			t.Fatalf("ParseKey(%q) = %+v, %v; want %+v", k, back, err, id)
		}
	})
}

func TestExceededErrorIs(t *testing.T) {
	var err error = &ExceededError{Scope: ScopeDept, Value: "eng", Period: PeriodMonth, LimitNano: 1, SpendNano: 2}
	if !errors.Is(err, ErrOverBudget) {
		t.Fatal("errors.Is(ExceededError, ErrOverBudget) is false")
	}
	if !strings.Contains(err.Error(), `dept "eng"`) || !strings.Contains(err.Error(), "month") {
		t.Fatalf("message %q does not name scope and period", err)
	}
}

// TestExceededErrorMessage: the refusal says spend, reservations, what
// other gateways hold and the request's own worst case as separate exact
// figures; a request refused on an untouched total does not claim a spend
// (issue #15: "has spent 0.00245865 of its 0.000001 USD" was its estimate).
func TestExceededErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		err  ExceededError
		want string
	}{
		{
			name: "own estimate alone over a tiny limit",
			err:  ExceededError{Scope: ScopeDept, Value: "x", Period: PeriodDay, LimitNano: 1_000, EstimateNano: 2_458_650},
			want: `budget exceeded: dept "x" day limit 0.000001 USD: spent 0.00, reserved by requests in flight 0.00, this request's worst case 0.00245865`,
		},
		{
			name: "spend and reservations",
			err:  ExceededError{Scope: ScopeTeam, Value: "research/ml", Period: PeriodMonth, LimitNano: 5 * usd, SpendNano: 4 * usd, ReservedNano: usd / 2, EstimateNano: 600_000_001},
			want: `budget exceeded: team "research/ml" month limit 5.00 USD: spent 4.00, reserved by requests in flight 0.50, this request's worst case 0.600000001`,
		},
		{
			name: "leases held by other gateways",
			err:  ExceededError{Scope: ScopeGlobal, Period: PeriodTotal, LimitNano: usd, SpendNano: 1_000, HeldNano: usd - 1_000, EstimateNano: 1_000},
			want: `budget exceeded: global "all" total limit 1.00 USD: spent 0.000001, reserved by requests in flight 0.00, held by other gateways 0.999999, this request's worst case 0.000001`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("message\n %s\nwant\n %s", got, tt.want)
			}
		})
	}
}

func TestQualify(t *testing.T) {
	tests := []struct {
		name, dept, team, want string
	}{
		{name: "plain", dept: "research", team: "ml", want: "research/ml"},
		{name: "same team, other dept", dept: "finance", team: "ml", want: "finance/ml"},
		{name: "no dept", dept: "", team: "ml", want: "/ml"},
		{name: "no team", dept: "research", team: "", want: ""},
		{name: "slash in the team is kept", dept: "a", team: "b/c", want: "a/b/c"},
		{name: "slash in the dept is escaped", dept: "a/b", team: "c", want: "a%2Fb/c"},
		{name: "percent and star in the dept", dept: "50%*", team: "x", want: "50%25%2A/x"},
		{name: "dept named star", dept: "*", team: "ml", want: "%2A/ml"},
		{name: "dot and unicode pass (the KV key escapes them)", dept: "r.d", team: "é", want: "r.d/é"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Qualify(tt.dept, tt.team)
			if got != tt.want {
				t.Fatalf("Qualify(%q, %q) = %q, want %q", tt.dept, tt.team, got, tt.want)
			}
			if got == "" {
				return
			}
			d, n, ok := SplitQualified(got)
			if !ok || d != tt.dept || n != tt.team {
				t.Fatalf("SplitQualified(%q) = %q, %q, %v; want %q, %q", got, d, n, ok, tt.dept, tt.team)
			}
			if err := config.CheckLimitValue("team", got); err != nil {
				t.Fatalf("a qualified value is not a valid limit value: %v", err)
			}
		})
	}
	for _, flat := range []string{"ml", "", "a%4/b", "r*/ml", "research/"} {
		if d, n, ok := SplitQualified(flat); ok {
			t.Errorf("SplitQualified(%q) = %q, %q, true; want false", flat, d, n)
		}
	}
	v := ScopeValues("k1", "alice", "research", "ml", "p1")
	if v != [NumScopes]string{ScopeDept: "research", ScopeTeam: "research/ml", ScopeProject: "research/p1", ScopeSubject: "alice", ScopeKey: "k1"} {
		t.Fatalf("ScopeValues = %q", v)
	}
	if s := NewScopes("k1", "alice", "research", "ml", ""); s != (Scopes{Key: "k1", Subject: "alice", Dept: "research", Team: "research/ml"}) {
		t.Fatalf("NewScopes = %+v", s)
	}
}

func FuzzQualify(f *testing.F) {
	for _, s := range [][2]string{{"research", "ml"}, {"", "x"}, {"a/b", "c/d"}, {"%2F", "*"}, {"*", "*"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, dept, name string) {
		if name == "" {
			return
		}
		v := Qualify(dept, name)
		d, n, ok := SplitQualified(v)
		if !ok || d != dept || n != name {
			t.Fatalf("SplitQualified(Qualify(%q, %q) = %q) = %q, %q, %v", dept, name, v, d, n, ok)
		}
		if name != "*" {
			if err := config.CheckLimitValue("project", v); err != nil {
				t.Fatalf("CheckLimitValue(%q): %v", v, err)
			}
		}
	})
}

func TestLimitMatches(t *testing.T) {
	tests := []struct {
		scope Scope
		limit string
		value string
		want  bool
	}{
		{ScopeTeam, "research/ml", "research/ml", true},
		{ScopeTeam, "research/ml", "finance/ml", false},
		{ScopeTeam, "research/ml", "/ml", false},
		{ScopeTeam, "*/ml", "research/ml", true},
		{ScopeTeam, "*/ml", "finance/ml", true},
		{ScopeTeam, "*/ml", "/ml", true},
		{ScopeTeam, "*/ml", "research/mlx", false},
		{ScopeTeam, "*/ml", "research/web", false},
		{ScopeTeam, "*/b/c", "a/b/c", true},
		{ScopeTeam, "*/c", "a%2Fb/c", true},
		{ScopeTeam, "*/c", "a/b/c", false},
		{ScopeTeam, Star, "research/ml", true},
		{ScopeTeam, Star, "finance/web", true},
		{ScopeProject, "finance/p1", "finance/p1", true},
		{ScopeProject, "finance/p1", "research/p1", false},
		{ScopeDept, "*/b", "a/b", false}, // dept values are not qualified
		{ScopeDept, "*/b", "*/b", true},
		{ScopeDept, "research", "research", true},
		{ScopeDept, "research", "finance", false},
		{ScopeGlobal, "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.scope.String()+" "+tt.limit+" vs "+tt.value, func(t *testing.T) {
			l := Limit{Scope: tt.scope, Value: tt.limit}
			if got := l.Matches(tt.value); got != tt.want {
				t.Fatalf("Matches = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestScopeValuesShareOneString(t *testing.T) {
	for _, tt := range []struct{ dept, team, project string }{
		{"research", "ml", "p1"}, {"", "ml", "p1"}, {"a/b", "c", "d"}, {"research", "ml", ""}, {"research", "", "p1"}, {"", "", ""},
	} {
		v := ScopeValues("k", "s", tt.dept, tt.team, tt.project)
		if v[ScopeTeam] != Qualify(tt.dept, tt.team) || v[ScopeProject] != Qualify(tt.dept, tt.project) {
			t.Errorf("ScopeValues(%q, %q, %q) = %q, %q", tt.dept, tt.team, tt.project, v[ScopeTeam], v[ScopeProject])
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = NewScopes("k1", "alice", "research", "ml", "p1") }); n != 1 {
		t.Errorf("NewScopes allocates %v times, want 1", n)
	}
}
