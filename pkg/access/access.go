// Package access is the one table of who may do what: the console checks
// it for every page and action, and the admin API's guard checks it for
// every endpoint (an admin bearer token is the role Admin), so both
// enforce by the same code.
//
// A role is global (Admin, Finance: every department) or bound to the
// user's own department (DeptAdmin, Viewer). An action on a department
// passes that department as scopeDept; an action on the whole gateway
// (every department's figures, the config) passes "" and is allowed to
// global roles only.
package access

// Roles a user may hold. The console maps them from ID token claims
// (console.roles); an admin bearer token on the admin API is Admin.
const (
	// Admin may do everything.
	Admin = "admin"
	// Finance sees all spend, statements and the FOCUS export, budgets,
	// requests and models, and the key list (never a secret); it changes
	// nothing.
	Finance = "finance"
	// DeptAdmin sees and manages the keys of its own department and sees
	// that department's budgets, spend and requests.
	DeptAdmin = "dept-admin"
	// Viewer sees its own department's spend.
	Viewer = "viewer"
)

// Actions, one per page or change.
const (
	SpendView     = "spend.view"     // spend totals and live figures
	StatementView = "statement.view" // statements and the FOCUS export
	BudgetsView   = "budgets.view"   // limits with spend, reserved and headroom
	RequestsView  = "requests.view"  // usage events and a request's price breakdown
	KeysView      = "keys.view"      // the API key list (never a secret)
	KeysManage    = "keys.manage"    // create, rotate and revoke API keys
	AuditView     = "audit.view"     // the audit log
	ModelsView    = "models.view"    // routes, targets and circuit state
	ConfigView    = "config.view"    // the running config, secrets redacted
	Reload        = "reload"         // reload the config
	Revoke        = "revoke"         // revoke and unrevoke tokens
	Debug         = "debug"          // pprof profiles
)

// Roles lists every role, for config validation and docs.
var Roles = []string{Admin, Finance, DeptAdmin, Viewer}

// Actions lists every action, for tests and docs.
var Actions = []string{SpendView, StatementView, BudgetsView, RequestsView, KeysView, KeysManage,
	AuditView, ModelsView, ConfigView, Reload, Revoke, Debug}

// grant is one role's row of the table.
type grant struct {
	// global roles act on every department and on the whole gateway;
	// the others only on their own department.
	global  bool
	actions map[string]bool
}

func set(actions ...string) map[string]bool {
	m := make(map[string]bool, len(actions))
	for _, a := range actions {
		m[a] = true
	}
	return m
}

// table is read-only after package initialisation.
var table = map[string]grant{
	Admin:     {global: true, actions: set(Actions...)},
	Finance:   {global: true, actions: set(SpendView, StatementView, BudgetsView, RequestsView, KeysView, ModelsView)},
	DeptAdmin: {actions: set(SpendView, BudgetsView, RequestsView, KeysView, KeysManage)},
	Viewer:    {actions: set(SpendView)},
}

// Valid reports whether role is one of Roles.
func Valid(role string) bool {
	_, ok := table[role]
	return ok
}

// Global reports whether role acts on every department (Admin, Finance)
// rather than on its own department only.
func Global(role string) bool { return table[role].global }

// Allowed reports whether a user of role, in department userDept, may
// perform action on department scopeDept ("" for the whole gateway or
// every department). Unknown roles and actions are refused. A
// department-bound role is allowed only on its own, non-empty department.
func Allowed(role, action, scopeDept, userDept string) bool {
	g, ok := table[role]
	if !ok || !g.actions[action] {
		return false
	}
	return g.global || (scopeDept != "" && scopeDept == userDept)
}

// Sees reports whether role may perform action on some department: the
// console shows a page in its navigation when it does. For a department
// bound role that is its own department.
func Sees(role, action, userDept string) bool {
	if Global(role) {
		return Allowed(role, action, "", userDept)
	}
	return Allowed(role, action, userDept, userDept)
}
