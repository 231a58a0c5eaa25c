package auth

import (
	"encoding/json"
	"fmt"

	"github.com/tollgate/tollgate/pkg/config"
)

// claimPath is a parsed claim path (config.ClaimNames documents the syntax).
type claimPath struct {
	// text is the path as configured; it names the claim in errors.
	text string
	// segs are the member names walked from the top-level claims.
	segs []string
}

func parseClaimPath(text string) (claimPath, error) {
	segs, err := config.ParseClaimPath(text)
	if err != nil {
		return claimPath{}, err
	}
	return claimPath{text: text, segs: segs}, nil
}

// get returns the JSON value at the path, or false when a member along the
// way is absent or a value before the last segment is not an object.
func (p claimPath) get(m map[string]json.RawMessage) (json.RawMessage, bool) {
	if len(p.segs) == 0 {
		return nil, false
	}
	raw, ok := m[p.segs[0]]
	for _, seg := range p.segs[1:] {
		if !ok || len(raw) == 0 || raw[0] != '{' {
			return nil, false
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return nil, false
		}
		raw, ok = obj[seg]
	}
	return raw, ok
}

// claimRule is a compiled config.ClaimMapping.
type claimRule struct {
	path                claimPath
	value               string
	dept, team, project string
}

// claimPaths are an issuer's compiled claim paths, mappings and defaults.
type claimPaths struct {
	sub, kid, dept, team, project, models, budgets, rpm, tpm, admin, priority claimPath
	rules                                                                     []claimRule
	defaults                                                                  config.ClaimDefaults
}

// compileClaims parses the claim paths of an issuer; n has its defaults
// applied.
func compileClaims(n config.ClaimNames, rules []config.ClaimMapping, defaults config.ClaimDefaults) (*claimPaths, error) {
	cp := &claimPaths{defaults: defaults}
	for _, f := range []struct {
		dst  *claimPath
		text string
	}{
		{&cp.sub, n.Subject}, {&cp.kid, n.KeyID}, {&cp.dept, n.Dept}, {&cp.team, n.Team},
		{&cp.project, n.Project}, {&cp.models, n.Models}, {&cp.budgets, n.Budgets},
		{&cp.rpm, n.RPM}, {&cp.tpm, n.TPM}, {&cp.admin, n.Admin}, {&cp.priority, n.Priority},
	} {
		p, err := parseClaimPath(f.text)
		if err != nil {
			return nil, fmt.Errorf("claims: %w", err)
		}
		*f.dst = p
	}
	for i, r := range rules {
		p, err := parseClaimPath(r.Claim)
		if err != nil {
			return nil, fmt.Errorf("claim_mappings[%d]: %w", i, err)
		}
		if r.Dept == "" && r.Team == "" && r.Project == "" {
			return nil, fmt.Errorf("claim_mappings[%d]: sets none of dept, team, project", i)
		}
		cp.rules = append(cp.rules, claimRule{path: p, value: r.Value, dept: r.Dept, team: r.Team, project: r.Project})
	}
	return cp, nil
}

// mapFields fills the principal's empty dept, team and project from the
// first matching rule, in table order, that sets each, then from the
// defaults; a dept still empty is NoDept.
func (cp *claimPaths) mapFields(m map[string]json.RawMessage, p *Principal) {
	for _, r := range cp.rules {
		if p.Dept != "" && p.Team != "" && p.Project != "" {
			return
		}
		raw, ok := r.path.get(m)
		if !ok || !claimHas(raw, r.value) {
			continue
		}
		fill(&p.Dept, r.dept)
		fill(&p.Team, r.team)
		fill(&p.Project, r.project)
	}
	fill(&p.Dept, cp.defaults.Dept)
	fill(&p.Team, cp.defaults.Team)
	fill(&p.Project, cp.defaults.Project)
	fill(&p.Dept, NoDept)
}

func fill(dst *string, v string) {
	if *dst == "" {
		*dst = v
	}
}

// claimHas reports whether raw is the string value or an array holding it.
func claimHas(raw json.RawMessage, value string) bool {
	switch {
	case len(raw) == 0:
		return false
	case raw[0] == '"':
		var s string
		return json.Unmarshal(raw, &s) == nil && s == value
	case raw[0] == '[':
		var arr []any
		if json.Unmarshal(raw, &arr) != nil {
			return false
		}
		for _, e := range arr {
			if s, ok := e.(string); ok && s == value {
				return true
			}
		}
	}
	return false
}

// Identity maps the claims of an ID token, a JSON object whose signature
// the caller has verified, to a principal by issuer c's claim names,
// mappings and defaults, exactly as a bearer token's claims are mapped.
// The console signs users in with it. c must have its defaults applied
// (config.Load does).
func Identity(c config.Issuer, payload []byte) (*Principal, error) {
	paths, err := compileClaims(c.Claims, c.ClaimMappings, c.ClaimDefaults)
	if err != nil {
		return nil, fmt.Errorf("issuer %s: %w", c.Name, err)
	}
	cl := claims{paths: paths}
	if err := json.Unmarshal(payload, &cl); err != nil {
		return nil, fmt.Errorf("decode claims: %w", err)
	}
	cl.p.Issuer = c.Name
	return &cl.p, nil
}

// HasClaim reports whether the claim at path (config.ClaimNames syntax)
// in the JSON object payload equals value (a string claim) or contains it
// (an array of strings), as a claim mapping matches.
func HasClaim(payload []byte, path, value string) (bool, error) {
	p, err := parseClaimPath(path)
	if err != nil {
		return false, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(payload, &m); err != nil {
		return false, fmt.Errorf("decode claims: %w", err)
	}
	raw, ok := p.get(m)
	return ok && claimHas(raw, value), nil
}
