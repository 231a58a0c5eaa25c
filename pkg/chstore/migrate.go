package chstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"net"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/pkg/chsql"
)

// migrationFiles holds the schema, one numbered file per migration.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one numbered schema change.
type Migration struct {
	// Version is the file's number: 1 for 0001_events.sql.
	Version int
	// Name is the file name.
	Name string
	// Statements are the file's SQL statements, without their ';'.
	Statements []string
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	slices.Sort(names)
	ms := make([]Migration, 0, len(names))
	for _, name := range names {
		base := path.Base(name)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive number and '_'", base)
		}
		if len(ms) > 0 && ms[len(ms)-1].Version == v {
			return nil, fmt.Errorf("migration %s: version %d used twice", base, v)
		}
		b, err := migrationFiles.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", base, err)
		}
		stmts, err := splitStatements(string(b))
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", base, err)
		}
		ms = append(ms, Migration{Version: v, Name: base, Statements: stmts})
	}
	return ms, nil
}

// splitStatements splits SQL into statements: lines starting with "--" are
// dropped, and a statement ends at a line whose last non-blank character
// is ';'.
func splitStatements(sql string) ([]string, error) {
	var stmts []string
	var cur strings.Builder
	for line := range strings.Lines(sql) {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "--") || (t == "" && cur.Len() == 0) {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(t, ";") {
			stmt := strings.TrimSpace(cur.String())
			stmt = strings.TrimSpace(strings.TrimSuffix(stmt, ";"))
			if stmt != "" {
				stmts = append(stmts, stmt)
			}
			cur.Reset()
		}
	}
	if rest := strings.TrimSpace(cur.String()); rest != "" {
		return nil, fmt.Errorf("statement without a closing ';': %.40q", rest)
	}
	return stmts, nil
}

// Migrate creates the database if needed and applies, in order, every
// embedded migration not yet recorded in its schema_migrations table. It is
// idempotent and safe to run from several processes at once: each statement
// is idempotent, so a migration run twice, or cut short and run again, ends
// in the same schema.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := Migrations()
	if err != nil {
		return err
	}
	return s.migrate(ctx, ms)
}

// migrate applies the migrations of ms not yet recorded.
func (s *Store) migrate(ctx context.Context, ms []Migration) error {
	if err := s.createDatabase(ctx); err != nil {
		return err
	}
	l, err := s.layout(ctx)
	if err != nil {
		return err
	}
	if err := s.applyAll(ctx, l, chsql.CreateMigrations.SQL); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	applied, err := s.AppliedMigrations(ctx)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if slices.Contains(applied, m.Version) {
			continue
		}
		for i, stmt := range m.Statements {
			if err := s.applyAll(ctx, l, stmt); err != nil {
				return fmt.Errorf("apply migration %s statement %d: %w", m.Name, i+1, err)
			}
		}
		if err := s.recordMigration(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// layout reads how the migrations apply: on one server, or on
// Options.Cluster, whose servers and shards it reads in system.clusters.
func (s *Store) layout(ctx context.Context) (layout, error) {
	l := layout{db: s.o.Database, cluster: s.o.Cluster, path: s.o.ReplicaPath}
	if l.cluster == "" {
		return l, nil
	}
	var err error
	if l.hosts, err = s.clusterHosts(ctx); err != nil {
		return l, err
	}
	var shards uint64
	if err := s.conn.QueryRow(ctx, chsql.ClusterShards.SQL, l.cluster).Scan(&shards); err != nil {
		return l, fmt.Errorf("look up cluster %s: %w", l.cluster, err)
	}
	if shards == 0 {
		return l, fmt.Errorf("%w: cluster %q is not in the server's remote_servers (system.clusters)", ErrInvalidOptions, l.cluster)
	}
	l.shards = int(shards)
	return l, nil
}

// clusterHosts returns the servers of Options.Cluster, host:port of
// their native protocol, as the server reached lists them.
func (s *Store) clusterHosts(ctx context.Context) ([]string, error) {
	var hosts []string
	var ports []uint16
	if err := s.conn.QueryRow(ctx, chsql.ClusterHosts.SQL, s.o.Cluster).Scan(&hosts, &ports); err != nil {
		return nil, fmt.Errorf("look up cluster %s: %w", s.o.Cluster, err)
	}
	addrs := make([]string, len(hosts))
	for i, h := range hosts {
		addrs[i] = net.JoinHostPort(h, strconv.Itoa(int(ports[i])))
	}
	return addrs, nil
}

// onEachServer runs f with a Store of its own on each server of the
// cluster in turn, stopping at the first error.
func (s *Store) onEachServer(ctx context.Context, hosts []string, f func(*Store) error) error {
	for _, host := range hosts {
		o := s.o
		o.Addr = host
		conn, err := open(o, o.Database)
		if err != nil {
			return err
		}
		err = f(&Store{conn: conn, o: o})
		conn.Close()
		if err != nil {
			return fmt.Errorf("on %s: %w", host, err)
		}
	}
	return nil
}

// applyAll applies stmt as the layout says (layout.rewrite).
func (s *Store) applyAll(ctx context.Context, l layout, stmt string) error {
	stmts, err := l.rewrite(stmt)
	if err != nil {
		return err
	}
	for _, st := range stmts {
		if each, ok := strings.CutPrefix(st, eachServerMark); ok {
			if err := s.applyEach(ctx, l, each); err != nil {
				return err
			}
			continue
		}
		if err := s.apply(ctx, st); err != nil {
			return err
		}
	}
	return nil
}

// applyEach applies stmt on every server of the cluster, through a
// connection of its own to each.
func (s *Store) applyEach(ctx context.Context, l layout, stmt string) error {
	return s.onEachServer(ctx, l.hosts, func(st *Store) error { return st.apply(ctx, stmt) })
}

// addColumn matches a statement that adds one column: ALTER TABLE t ADD
// COLUMN c <type>, t qualified by its database and ON CLUSTER x on a
// cluster.
var addColumn = regexp.MustCompile(`(?is)^ALTER\s+TABLE\s+(?:[A-Za-z_][A-Za-z0-9_]*\.)?([A-Za-z_][A-Za-z0-9_]*)\s+(?:ON\s+CLUSTER\s+[A-Za-z_][A-Za-z0-9_]*\s+)?ADD\s+COLUMN\s+([A-Za-z_][A-Za-z0-9_]*)\s`)

// apply runs one statement. ClickHouse 18.16 has no ADD COLUMN IF NOT
// EXISTS, so an ALTER TABLE ... ADD COLUMN whose column is already there
// (a migration cut short and run again) is skipped instead.
func (s *Store) apply(ctx context.Context, stmt string) error {
	if m := addColumn.FindStringSubmatch(stmt); m != nil {
		var n uint64
		err := s.conn.QueryRow(ctx, chsql.ColumnExists.SQL, m[1], m[2]).Scan(&n)
		if err != nil {
			return fmt.Errorf("look up column %s.%s: %w", m[1], m[2], err)
		}
		if n > 0 {
			return nil
		}
	}
	return s.conn.Exec(ctx, stmt)
}

// AppliedMigrations returns the versions recorded in schema_migrations, in
// ascending order.
func (s *Store) AppliedMigrations(ctx context.Context) ([]int, error) {
	rows, err := s.conn.Query(ctx, chsql.AppliedMigrations.SQL)
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v uint32
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("read schema_migrations: %w", err)
		}
		vs = append(vs, int(v))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	return vs, nil
}

// createDatabase creates the database through a connection whose default
// database is the server's, since a session cannot start in a database
// that does not exist.
func (s *Store) createDatabase(ctx context.Context) error {
	conn, err := open(s.o, "")
	if err != nil {
		return err
	}
	defer conn.Close()
	stmt := chsql.CreateDatabase(s.o.Database)
	if s.o.Cluster != "" {
		stmt += " ON CLUSTER " + s.o.Cluster
	}
	if err := conn.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("create database %s: %w", s.o.Database, err)
	}
	return nil
}

func (s *Store) recordMigration(ctx context.Context, m Migration) error {
	b, err := s.conn.PrepareBatch(ctx, chsql.InsertMigration.SQL)
	if err != nil {
		return fmt.Errorf("record migration %s: %w", m.Name, err)
	}
	if err := b.Append(uint32(m.Version), m.Name, time.Now()); err != nil {
		_ = b.Abort()
		return fmt.Errorf("record migration %s: %w", m.Name, err)
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("record migration %s: %w", m.Name, err)
	}
	return nil
}
