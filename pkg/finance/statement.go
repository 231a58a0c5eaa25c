package finance

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tollgate/tollgate/pkg/chsql"
	"github.com/tollgate/tollgate/pkg/pricing"
)

// ErrVerify is returned by Verify for a bad signature or a broken chain.
var ErrVerify = errors.New("statement verification failed")

// Line is one total of a statement.
type Line struct {
	Name             string `json:"name"`
	Requests         uint64 `json:"requests"`
	PromptTokens     uint64 `json:"prompt_tokens"`
	CompletionTokens uint64 `json:"completion_tokens"`
	CostNanoUSD      int64  `json:"cost_nano_usd"`
	// RecoveredRequests and RecoveredCostNanoUSD are the part of the line
	// billed from the begun records of requests whose gateway ended before
	// recording them (the recovery rule, docs/usage-recovery.md). Omitted
	// when zero, so statements written before they existed hash the same.
	RecoveredRequests    uint64 `json:"recovered_requests,omitempty"`
	RecoveredCostNanoUSD int64  `json:"recovered_cost_nano_usd,omitempty"`
}

// Statement is one department's month: totals by team, project and model,
// linked to the previous month's statement by PrevSHA256 (hex SHA-256 of
// its canonical JSON, signature included; empty for the first) and signed.
//
// The canonical JSON is encoding/json of the struct: fields in declaration
// order, lines sorted by name, no extra spaces. Signature is the Ed25519
// signature (hex) of the canonical JSON with Signature empty.
type Statement struct {
	Dept        string `json:"dept"`
	Month       string `json:"month"` // YYYY-MM, UTC
	GeneratedAt string `json:"generated_at"`
	Total       Line   `json:"total"`
	Teams       []Line `json:"teams"`
	Projects    []Line `json:"projects"`
	Models      []Line `json:"models"`
	PrevSHA256  string `json:"prev_sha256"`
	PublicKey   string `json:"public_key"` // hex Ed25519
	Signature   string `json:"signature"`
}

// BuildStatement sums dept's events of month (YYYY-MM) from ClickHouse.
func BuildStatement(ctx context.Context, conn driver.Conn, dept, month string, now time.Time) (*Statement, error) {
	from, err := time.Parse("2006-01", month)
	if err != nil {
		return nil, fmt.Errorf("month %q: want YYYY-MM: %w", month, err)
	}
	to := from.AddDate(0, 1, 0)
	s := &Statement{Dept: dept, Month: month, GeneratedAt: now.UTC().Format(time.RFC3339), Total: Line{Name: "total"}}
	for _, g := range []struct {
		col string
		q   chsql.Statement
		dst *[]Line
	}{{"team", chsql.StatementByTeam, &s.Teams}, {"project", chsql.StatementByProject, &s.Projects}, {"served_model", chsql.StatementByModel, &s.Models}} {
		rows, err := conn.Query(ctx, g.q.SQL, dept, from.Unix(), to.Unix())
		if err != nil {
			return nil, fmt.Errorf("sum %s by %s: %w", dept, g.col, err)
		}
		*g.dst = []Line{}
		for rows.Next() {
			var l Line
			if err := rows.Scan(&l.Name, &l.Requests, &l.PromptTokens, &l.CompletionTokens, &l.CostNanoUSD,
				&l.RecoveredRequests, &l.RecoveredCostNanoUSD); err != nil {
				rows.Close()
				return nil, fmt.Errorf("sum %s by %s: %w", dept, g.col, err)
			}
			*g.dst = append(*g.dst, l)
			if g.col == "team" {
				s.Total.Requests += l.Requests
				s.Total.PromptTokens += l.PromptTokens
				s.Total.CompletionTokens += l.CompletionTokens
				s.Total.CostNanoUSD += l.CostNanoUSD
				s.Total.RecoveredRequests += l.RecoveredRequests
				s.Total.RecoveredCostNanoUSD += l.RecoveredCostNanoUSD
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("sum %s by %s: %w", dept, g.col, err)
		}
	}
	return s, nil
}

// Canonical returns the statement's canonical JSON.
func (s *Statement) Canonical() []byte {
	c := *s
	for _, ls := range []*[]Line{&c.Teams, &c.Projects, &c.Models} {
		sorted := append([]Line{}, (*ls)...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
		*ls = sorted
	}
	b, _ := json.Marshal(&c) // only strings and integers: never fails
	return b
}

// Hash is the hex SHA-256 of the canonical JSON, what the next month's
// PrevSHA256 holds.
func (s *Statement) Hash() string {
	h := sha256.Sum256(s.Canonical())
	return hex.EncodeToString(h[:])
}

// Sign links s to prev (nil for the first statement of a chain) and signs
// it with key.
func (s *Statement) Sign(prev *Statement, key ed25519.PrivateKey) {
	s.PrevSHA256 = ""
	if prev != nil {
		s.PrevSHA256 = prev.Hash()
	}
	s.PublicKey = hex.EncodeToString(key.Public().(ed25519.PublicKey))
	s.Signature = ""
	s.Signature = hex.EncodeToString(ed25519.Sign(key, s.Canonical()))
}

// checkSignature verifies s's signature, against pub when given, else
// against the key s names.
func (s *Statement) checkSignature(pub ed25519.PublicKey) error {
	if pub == nil {
		k, err := hex.DecodeString(s.PublicKey)
		if err != nil || len(k) != ed25519.PublicKeySize {
			return fmt.Errorf("%w: %s %s: bad public key", ErrVerify, s.Dept, s.Month)
		}
		pub = k
	} else if s.PublicKey != hex.EncodeToString(pub) {
		return fmt.Errorf("%w: %s %s: signed by another key", ErrVerify, s.Dept, s.Month)
	}
	sig, err := hex.DecodeString(s.Signature)
	c := *s
	c.Signature = ""
	if err != nil || !ed25519.Verify(pub, c.Canonical(), sig) {
		return fmt.Errorf("%w: %s %s: bad signature", ErrVerify, s.Dept, s.Month)
	}
	return nil
}

// Verify checks every statement's signature (against pub, or when pub is
// nil against the key each names, which then must be one key per dept) and
// that each dept's statements form a chain: sorted by month, each one's
// PrevSHA256 is the hash of the one before, and months follow each other
// without a gap. The first statement of a dept may link to one not given.
func Verify(stmts []*Statement, pub ed25519.PublicKey) error {
	byDept := map[string][]*Statement{}
	for _, s := range stmts {
		if err := s.checkSignature(pub); err != nil {
			return err
		}
		byDept[s.Dept] = append(byDept[s.Dept], s)
	}
	for dept, ss := range byDept {
		sort.Slice(ss, func(i, j int) bool { return ss[i].Month < ss[j].Month })
		for i := 1; i < len(ss); i++ {
			prev, cur := ss[i-1], ss[i]
			pm, _ := time.Parse("2006-01", prev.Month)
			if pm.AddDate(0, 1, 0).Format("2006-01") != cur.Month {
				return fmt.Errorf("%w: %s: %s follows %s", ErrVerify, dept, cur.Month, prev.Month)
			}
			if cur.PublicKey != prev.PublicKey {
				return fmt.Errorf("%w: %s %s: signed by another key than %s", ErrVerify, dept, cur.Month, prev.Month)
			}
			if cur.PrevSHA256 != prev.Hash() {
				return fmt.Errorf("%w: %s %s does not link to %s (changed after signing?)", ErrVerify, dept, cur.Month, prev.Month)
			}
		}
	}
	return nil
}

// WriteCSV writes the statement as CSV: kind,name,requests,prompt_tokens,
// completion_tokens,cost_usd,recovered_requests,recovered_cost_usd, one row
// per line and a total row.
func (s *Statement) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"dept", "month", "kind", "name", "requests", "prompt_tokens", "completion_tokens", "cost_usd",
		"recovered_requests", "recovered_cost_usd"})
	row := func(kind string, l Line) {
		cw.Write([]string{s.Dept, s.Month, kind, l.Name, strconv.FormatUint(l.Requests, 10), strconv.FormatUint(l.PromptTokens, 10),
			strconv.FormatUint(l.CompletionTokens, 10), pricing.FormatUSD(l.CostNanoUSD),
			strconv.FormatUint(l.RecoveredRequests, 10), pricing.FormatUSD(l.RecoveredCostNanoUSD)})
	}
	for _, g := range []struct {
		kind  string
		lines []Line
	}{{"team", s.Teams}, {"project", s.Projects}, {"model", s.Models}} {
		for _, l := range g.lines {
			row(g.kind, l)
		}
	}
	row("total", s.Total)
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return nil
}
