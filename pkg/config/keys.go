package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Class says when a change to a config key takes effect in a running
// gateway.
type Class uint8

// Classes of config keys.
const (
	// Reload keys are applied by a reload (SIGHUP, POST /admin/reload) to
	// new requests.
	Reload Class = iota + 1
	// Restart keys are read at start only: a reload that changes one is
	// refused, naming it, and the running config stays.
	Restart
)

// String is "reload" or "restart".
func (c Class) String() string {
	switch c {
	case Reload:
		return "reload"
	case Restart:
		return "restart"
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// KeyClass is one row of Keys.
type KeyClass struct {
	// Path names one key by its YAML names: "nats.url", "models[].cache.ttl"
	// ("[]" is every element of a list), "prices.*.input" ("*" is every key
	// of a map). A segment "{a,b}" stands for the keys a and b.
	Path  string
	Class Class
	// Why says, for a restart key, what holds it from start; for a reload
	// key applied under a condition, when it is refused.
	Why string
}

// Keys classifies every key of the config file (every leaf field of
// Config; a test walks the struct and fails on a key missing here). The
// gateway's reload refuses a file that changes a Restart key
// (RestartChanges), and the list of restart-only keys in docs/operations.md is
// generated from this table.
var Keys = []KeyClass{
	{"listen", Restart, "the public listener"},
	{"{body_limit,read_timeout,idle_timeout,write_timeout,max_header_bytes}", Restart, "the public listener (its limits and timeouts)"},
	{"shutdown_grace", Reload, ""},
	{"log.{format,level,requests}", Restart, "the logger"},
	{"admin.listen", Restart, "the admin listener"},
	{"admin.require_token", Reload, ""},
	{"admin.allowed_hosts", Restart, "the admin listener's Host check"},
	{"console.enabled", Restart, "the admin listener's routes"},
	{"console.session_ttl", Restart, "the session store's expiry"},
	{"console.oidc.{issuer,client_id,client_secret_file,redirect_url,scopes}", Reload, ""},
	{"console.roles[].{claim,value,role}", Reload, ""},
	{"console.dept_claim", Reload, ""},
	{"profiling.{server_address,application_name,tags}", Restart, "the profiler"},
	{"tracing.{endpoint,service_name,sample_ratio,insecure}", Restart, "the trace exporter"},

	{"auth.issuers[].{name,issuer,audience,algorithms,leeway,jwks_file,discovery_url,jwks_url,jwks_refresh_min,jwks_refresh_max,allow_http}", Reload, ""},
	{"auth.issuers[].keys[].{kid,secret,secret_file,public_key,public_key_file}", Reload, ""},
	{"auth.issuers[].claims.{subject,key_id,dept,team,project,models,budgets,rpm,tpm,admin,priority}", Reload, ""},
	{"auth.issuers[].claim_mappings[].{claim,value,dept,team,project}", Reload, ""},
	{"auth.issuers[].claim_defaults.{dept,team,project}", Reload, ""},
	{"auth.{cache_size,allow_query_key}", Reload, ""},

	{"providers[].kind", Reload, "it adds the first provider of kind mock (the mock upstream starts only with the gateway)"},
	{"providers[].{name,preset,base_url,api_version,stream_usage,headers,region,access_key_id,secret_access_key,session_token,api_key}", Reload, ""},
	{"providers[].timeouts.{connect,first_byte,idle,total}", Reload, ""},
	{"providers[].{max_conns,max_idle_conn_duration,max_response_body}", Reload, ""},
	{"files_provider", Reload, ""},

	{"models[].{name,wildcard_pattern,type,aliases,strategy,fallbacks,fallback_on,batch}", Reload, ""},
	{"models[].targets[].{provider,model,weight,rpm,tpm,api_keys}", Reload, ""},
	{"models[].retry.{max_attempts,backoff_base,backoff_max,deadline}", Reload, ""},
	{"models[].hedge.after", Reload, ""},
	{"models[].cache.ttl", Reload,
		"a model sets it and none did at start (the response cache was not started), or it is above the longest at start (the cache bucket's TTL)"},
	{"models[].cache.{share_across_scopes,bill}", Reload, ""},
	{"routing.{default_fallback,fallback_on}", Reload, ""},
	{"routing.retry.{max_attempts,backoff_base,backoff_max,deadline}", Reload, ""},
	{"routing.circuit.{failures,failure_rate,window,min_requests,cooldown}", Reload, ""},

	{"budgets[].{scope,value,amount_usd,period}", Reload, ""},
	{"budgets[].degrade[].{at,priorities,model,refuse}", Reload, ""},
	{"budget_overcommit", Reload, ""},
	{"priority.{levels,default}", Reload, ""},
	{"budget.leases.{disabled,ttl,max_slice_usd,refill_wait,first_grant_wait}", Restart, "the budget tracker and its leases"},
	{"rate_limits[].{scope,value,rpm,tpm}", Reload, ""},
	{"rate_limit.{local,presence_ttl}", Restart, "the rate limit presence (its KV bucket and renewals)"},

	{"clickhouse.{cluster,replica_path}", Restart, "the analytics service's migrations, applied at its start"},
	{"nats.{url,creds_file,nkey_file}", Restart, "the NATS connection"},
	{"nats.tls.{ca_file,cert_file,key_file}", Restart, "the NATS connection"},
	{"nats.{replicas,max_age,duplicate_window}", Restart, "the usage stream and the KV buckets, set up at start"},
	{"usage.{spool_dir,buffer,batch_size,batch_bytes,spool_max_bytes,sync_interval,flush_delay,fail_closed,compression}", Restart,
		"the usage publisher and its spool"},
	{"usage.unpriced_model", Reload, ""},

	{"price_book", Reload, ""},
	{"prices.*.{input,output,cached_input,cache_write,per_request,per_image,per_image_by,per_audio_second,per_1m_characters}", Reload, ""},
	{"prices.*.long.{above_prompt_tokens,input,output,cached_input,cache_write}", Reload, ""},
	{"prices.*.tiers.{flex,priority}.{input,output,cached_input}", Reload, ""},
}

// ExpandPath returns the key paths a Keys path stands for: each "{a,b}"
// segment gives one path per name.
func ExpandPath(p string) []string {
	open := strings.IndexByte(p, '{')
	if open < 0 {
		return []string{p}
	}
	end := strings.IndexByte(p[open:], '}')
	if end < 0 {
		return []string{p}
	}
	end += open
	var out []string
	for _, name := range strings.Split(p[open+1:end], ",") {
		out = append(out, ExpandPath(p[:open]+name+p[end+1:])...)
	}
	return out
}

// LeafKeys returns the path of every key of the config file, in the
// notation of KeyClass.Path, in field order.
func LeafKeys() []string {
	var out []string
	walkKeys(func(path, _ string) { out = append(out, path) })
	return out
}

// KeyField is one key of the config file: a field of a struct type
// reachable from Config that the file can set.
type KeyField struct {
	// Path is the key's path in the notation of KeyClass.Path; a section
	// that is a list or a map is named without its "[]" or ".*".
	Path string
	// Owner is the struct type that declares Field.
	Owner reflect.Type
	Field reflect.StructField
	// Leaf is false for a section: a struct, a list of structs or a map of
	// structs, whose own keys follow it.
	Leaf bool
}

// KeyFields returns every key of the config file, sections and leaves,
// in field order (a section before its keys).
func KeyFields() []KeyField {
	var out []KeyField
	keyFields(reflect.TypeFor[Config](), "", &out)
	return out
}

// keyFields appends to out the keys under struct type t at prefix p.
func keyFields(t reflect.Type, p string, out *[]KeyField) {
	for i := range t.NumField() {
		sf := t.Field(i)
		name := yamlName(sf)
		if name == "" {
			continue
		}
		q := name
		if p != "" {
			q = p + "." + name
		}
		k := KeyField{Path: q, Owner: t, Field: sf}
		ft := deref(sf.Type)
		switch {
		case ft.Kind() == reflect.Struct:
			*out = append(*out, k)
			keyFields(ft, q, out)
		case ft.Kind() == reflect.Slice && deref(ft.Elem()).Kind() == reflect.Struct:
			*out = append(*out, k)
			keyFields(deref(ft.Elem()), q+"[]", out)
		case ft.Kind() == reflect.Map && deref(ft.Elem()).Kind() == reflect.Struct:
			*out = append(*out, k)
			keyFields(deref(ft.Elem()), q+".*", out)
		default:
			k.Leaf = true
			*out = append(*out, k)
		}
	}
}

// walkKeys calls f with the path of every leaf key under Config and the
// Go struct type and field that hold it ("NATS.URL").
func walkKeys(f func(path, owner string)) {
	for _, k := range KeyFields() {
		if k.Leaf {
			f(k.Path, k.Owner.Name()+"."+k.Field.Name)
		}
	}
}

// yamlName is a field's key name; "" for a field the file cannot set.
func yamlName(sf reflect.StructField) string {
	name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
	if name == "-" || !sf.IsExported() {
		return ""
	}
	if name == "" {
		name = strings.ToLower(sf.Name)
	}
	return name
}

func deref(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Pointer {
		return t.Elem()
	}
	return t
}

// RestartChanges returns the Restart keys (Keys) whose values differ
// between before and after, in table order: what a reload from before to
// after cannot apply. A list key differs when any element's value does,
// or when elements were added or removed.
func RestartChanges(before, after *Config) []string {
	var out []string
	for _, k := range Keys {
		if k.Class != Restart {
			continue
		}
		for _, p := range ExpandPath(k.Path) {
			segs := strings.Split(p, ".")
			var a, b []any
			collect(reflect.ValueOf(before).Elem(), segs, &a)
			collect(reflect.ValueOf(after).Elem(), segs, &b)
			if !reflect.DeepEqual(a, b) {
				out = append(out, p)
			}
		}
	}
	return out
}

// collect appends to out the values at path segs under v: every element
// of a "[]" list, and every key and value of a "*" map, sorted by key.
func collect(v reflect.Value, segs []string, out *[]any) {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			*out = append(*out, nil)
			return
		}
		v = v.Elem()
	}
	if len(segs) == 0 {
		*out = append(*out, v.Interface())
		return
	}
	if segs[0] == "*" {
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			*out = append(*out, k.Interface())
			collect(v.MapIndex(k), segs[1:], out)
		}
		return
	}
	name, list := strings.CutSuffix(segs[0], "[]")
	f := fieldByKey(v, name)
	if !list {
		collect(f, segs[1:], out)
		return
	}
	*out = append(*out, f.Len())
	for i := range f.Len() {
		collect(f.Index(i), segs[1:], out)
	}
}

// fieldByKey is the field of struct v whose key name is name; it panics
// on a name Keys does not match to a field, which a test rules out.
func fieldByKey(v reflect.Value, name string) reflect.Value {
	t := v.Type()
	for i := range t.NumField() {
		if yamlName(t.Field(i)) == name {
			return v.Field(i)
		}
	}
	panic("config: no key " + name + " in " + t.String())
}
