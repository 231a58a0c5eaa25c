package config

import (
	"fmt"
	"strings"
)

// Qualified reports whether the values of a budget scope are qualified by
// their department: team and project values are written "<dept>/<name>"
// (research/ml), because two departments may both have a team ml (issue
// #13).
func Qualified(scope string) bool { return scope == "team" || scope == "project" }

// CheckLimitValue checks the value of a budget limit of scope team or
// project (other scopes are not checked here). Accepted:
//
//	"*"            each team (project) of every department, separately
//	"*/ml"         team ml of every department, each separately
//	"research/ml"  team ml of department research only
//	"/ml"          team ml of tokens without a department
//
// The department part is written with "%" as "%25", "/" as "%2F" and "*"
// as "%2A" (so "a/b" is the department "a" and the team "b", and a
// department literally named "*" is written "%2A"); the name part is taken
// as is, up to the end, so a team may contain "/". A bare "ml" is refused
// with an error naming the new syntax: it used to mean the one total
// shared by every team named ml, which no longer exists.
func CheckLimitValue(scope, value string) error {
	if !Qualified(scope) || value == "*" {
		return nil
	}
	dept, name, ok := strings.Cut(value, "/")
	if !ok {
		return fmt.Errorf("%s value %q must name its department: write \"<dept>/%s\" for %s %s of one department, \"*/%s\" for %s %s of every department, or \"*\" for every %s",
			scope, value, value, scope, value, value, scope, value, scope)
	}
	switch {
	case name == "":
		return fmt.Errorf("%s value %q has no %s name after the department", scope, value, scope)
	case name == "*":
		return fmt.Errorf("%s value %q: a limit for each %s of one department is not supported; limit the department (scope dept) or name the %ss", scope, value, scope, scope)
	case dept == "*":
		return nil
	}
	if err := checkDeptPart(dept); err != nil {
		return fmt.Errorf("%s value %q: %w", scope, value, err)
	}
	return nil
}

// checkDeptPart checks an escaped department: "%" only as %25, %2F or %2A,
// and no raw "*".
func checkDeptPart(d string) error {
	for i := 0; i < len(d); i++ {
		switch d[i] {
		case '*':
			return fmt.Errorf("department part %q: write a department named with \"*\" as %%2A (or \"*\" alone for every department)", d)
		case '%':
			if e := d[i+1:]; !(strings.HasPrefix(e, "25") || strings.HasPrefix(e, "2F") || strings.HasPrefix(e, "2A")) {
				return fmt.Errorf("department part %q: %% must start %%25, %%2F or %%2A", d)
			}
			i += 2
		}
	}
	return nil
}
