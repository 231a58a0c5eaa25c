package access

import "testing"

func TestAllowed(t *testing.T) {
	tests := []struct {
		role, action, scope, dept string
		want                      bool
	}{
		{Admin, KeysManage, "", "", true},
		{Admin, KeysManage, "eng", "", true},
		{Admin, Debug, "", "", true},
		{Finance, SpendView, "", "", true},
		{Finance, SpendView, "eng", "ops", true},
		{Finance, StatementView, "", "", true},
		{Finance, KeysView, "eng", "", true},
		{Finance, KeysManage, "eng", "", false},
		{Finance, AuditView, "", "", false},
		{Finance, Reload, "", "", false},
		{DeptAdmin, KeysManage, "eng", "eng", true},
		{DeptAdmin, KeysView, "eng", "eng", true},
		{DeptAdmin, BudgetsView, "eng", "eng", true},
		{DeptAdmin, KeysManage, "ops", "eng", false},
		{DeptAdmin, KeysView, "", "eng", false},
		{DeptAdmin, KeysManage, "", "", false},
		{DeptAdmin, AuditView, "eng", "eng", false},
		{DeptAdmin, StatementView, "eng", "eng", false},
		{Viewer, SpendView, "eng", "eng", true},
		{Viewer, SpendView, "ops", "eng", false},
		{Viewer, SpendView, "", "eng", false},
		{Viewer, BudgetsView, "eng", "eng", false},
		{Viewer, KeysView, "eng", "eng", false},
		{"", SpendView, "eng", "eng", false},
		{"root", SpendView, "", "", false},
		{Admin, "keys.delete", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.role+"/"+tt.action+"/"+tt.scope+"/"+tt.dept, func(t *testing.T) {
			if got := Allowed(tt.role, tt.action, tt.scope, tt.dept); got != tt.want {
				t.Errorf("Allowed = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestTableCoversEveryRole fails when a role in Roles has no row, or an
// action granted is not in Actions (a typo would grant nothing).
func TestTableCoversEveryRole(t *testing.T) {
	known := set(Actions...)
	for _, r := range Roles {
		g, ok := table[r]
		if !ok {
			t.Errorf("role %q has no row", r)
		}
		for a := range g.actions {
			if !known[a] {
				t.Errorf("role %q is granted unknown action %q", r, a)
			}
		}
	}
	if len(table) != len(Roles) {
		t.Errorf("table has %d roles, Roles %d", len(table), len(Roles))
	}
}

func TestSees(t *testing.T) {
	if !Sees(Viewer, SpendView, "eng") || Sees(Viewer, KeysView, "eng") {
		t.Error("viewer: sees spend only")
	}
	if Sees(Viewer, SpendView, "") {
		t.Error("a viewer without a department sees nothing")
	}
	if !Sees(Finance, StatementView, "") || Sees(Finance, AuditView, "") {
		t.Error("finance: statements, not the audit log")
	}
	if !Sees(DeptAdmin, KeysManage, "eng") {
		t.Error("dept-admin manages its department's keys")
	}
}

// BenchmarkAllowed is the check every admin request and console page
// makes: two map lookups, no allocation (expected 0 allocs/op).
func BenchmarkAllowed(b *testing.B) {
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if Allowed(DeptAdmin, KeysManage, "eng", "eng") {
			n++
		}
	}
	if n == 0 {
		b.Fatal("not allowed")
	}
}
