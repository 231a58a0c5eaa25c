package chstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"

	"github.com/tollgate/tollgate/pkg/chsql"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// Options configure Open. Zero fields take the defaults shown.
type Options struct {
	// Addr is the server's native-protocol address, host:port; several
	// servers may be given comma-separated. Default 127.0.0.1:9000. The
	// HTTP interface is not supported.
	Addr string
	// Database holds the tables. Default "tollgate". Migrate creates it.
	Database string
	// User and Password authenticate. Default user "default", no password.
	User     string
	Password string
	// TLS, when set, encrypts the connections.
	TLS *tls.Config
	// DialTimeout bounds connecting. Default 5s.
	DialTimeout time.Duration
	// ReadTimeout bounds each read from the server. Default 30s.
	ReadTimeout time.Duration
	// MaxOpenConns caps the connection pool. Default 4.
	MaxOpenConns int
	// Cluster, when set, is the ClickHouse cluster (a <remote_servers>
	// entry of the servers' config) the schema lives on: Migrate creates
	// every table ON CLUSTER with a Replicated engine, and with several
	// shards a Distributed table <name>_all over each (cluster.go). Every
	// server needs the macros {shard} and {replica} and a ZooKeeper. Empty
	// (the default): one server, plain MergeTree tables.
	Cluster string
	// ReplicaPath is the ZooKeeper path under which the replicated tables
	// keep their state; /<database>/<table> is appended. Used with Cluster
	// only. Default DefaultReplicaPath, /clickhouse/tables/{shard}.
	ReplicaPath string
}

// ErrInvalidOptions is returned by Open for options that can never work.
var ErrInvalidOptions = errors.New("invalid clickhouse options")

// dbName is what Database may be: it is put into SQL as an identifier.
var dbName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

func (o Options) withDefaults() (Options, error) {
	if o.Addr == "" {
		o.Addr = "127.0.0.1:9000"
	}
	if o.Database == "" {
		o.Database = "tollgate"
	}
	if !dbName.MatchString(o.Database) {
		return o, fmt.Errorf("%w: database name %q: want letters, digits and '_'", ErrInvalidOptions, o.Database)
	}
	if o.User == "" {
		o.User = "default"
	}
	if o.Cluster != "" && !clusterName.MatchString(o.Cluster) {
		return o, fmt.Errorf("%w: cluster name %q: want letters, digits and '_'", ErrInvalidOptions, o.Cluster)
	}
	if o.ReplicaPath == "" {
		o.ReplicaPath = DefaultReplicaPath
	}
	if !replicaPath.MatchString(o.ReplicaPath) {
		return o, fmt.Errorf("%w: replica path %q: want an absolute path of letters, digits, '_', '-', '.', '/' and macros in braces", ErrInvalidOptions, o.ReplicaPath)
	}
	o.ReplicaPath = strings.TrimSuffix(o.ReplicaPath, "/")
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 30 * time.Second
	}
	if o.MaxOpenConns <= 0 {
		o.MaxOpenConns = 4
	}
	return o, nil
}

// Store is a connection pool to the analytics database. It is safe for
// concurrent use.
type Store struct {
	conn driver.Conn
	o    Options
	// insertSettings are the settings of the loader's inserts: on a
	// cluster whose servers know it, deduplicate_blocks_in_dependent_materialized_views.
	insertSettings clickhouse.Settings
	// insertSQL is the loader's insert: into usage_events on one server,
	// into IngestTable on a cluster.
	insertSQL string
}

// Open connects to ClickHouse over the native protocol (LZ4-compressed) and
// checks that the server answers. The database need not exist yet: Migrate
// creates it.
func Open(ctx context.Context, o Options) (*Store, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	conn, err := open(o, o.Database)
	if err != nil {
		return nil, err
	}
	s := &Store{conn: conn, o: o, insertSQL: chsql.InsertEvents.SQL}
	if o.Cluster != "" {
		s.insertSQL = chsql.InsertEventsInto(IngestTable)
	}
	if err := s.Ping(ctx); err != nil && !isUnknownDatabase(err) {
		conn.Close()
		return nil, err
	}
	if o.Cluster != "" {
		if err := s.clusterSettings(ctx); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return s, nil
}

// dedupViews is the setting without which current releases do not
// deduplicate the blocks that views write, which the cluster layout relies
// on (IngestTable). ClickHouse 18.16 does not have it, and deduplicates
// them when the views' source table cannot deduplicate itself (Null).
const dedupViews = "deduplicate_blocks_in_dependent_materialized_views"

// clusterSettings sets the loader's insert settings from what the server
// knows.
func (s *Store) clusterSettings(ctx context.Context) error {
	conn, err := open(s.o, "")
	if err != nil {
		return err
	}
	defer conn.Close()
	var n uint64
	if err := conn.QueryRow(ctx, chsql.HasSetting.SQL, dedupViews).Scan(&n); err != nil {
		return fmt.Errorf("look up setting %s: %w", dedupViews, err)
	}
	if n > 0 {
		s.insertSettings = clickhouse.Settings{dedupViews: 1}
	}
	return nil
}

// open returns a lazily connecting pool whose default database is db.
func open(o Options, db string) (driver.Conn, error) {
	conn, err := clickhouse.Open(&clickhouse.Options{
		Protocol:     clickhouse.Native,
		Addr:         strings.Split(o.Addr, ","),
		Auth:         clickhouse.Auth{Database: db, Username: o.User, Password: o.Password},
		TLS:          o.TLS,
		DialTimeout:  o.DialTimeout,
		ReadTimeout:  o.ReadTimeout,
		MaxOpenConns: o.MaxOpenConns,
		MaxIdleConns: o.MaxOpenConns,
		Compression:  &clickhouse.Compression{Method: clickhouse.CompressionLZ4},
	})
	if err != nil {
		return nil, fmt.Errorf("open clickhouse %s: %w", o.Addr, err)
	}
	return conn, nil
}

// isUnknownDatabase reports ClickHouse error 81, UNKNOWN_DATABASE.
func isUnknownDatabase(err error) bool {
	var ex *clickhouse.Exception
	return errors.As(err, &ex) && ex.Code == 81
}

// Conn returns the connection pool, for queries. Its default database is
// Database(), so table names need no qualification.
func (s *Store) Conn() driver.Conn { return s.conn }

// Database returns the database the tables live in.
func (s *Store) Database() string { return s.o.Database }

// Ping checks that the server answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.conn.Ping(ctx); err != nil {
		return fmt.Errorf("ping clickhouse %s: %w", s.o.Addr, err)
	}
	return nil
}

// Close closes the connection pool.
func (s *Store) Close() error {
	if err := s.conn.Close(); err != nil {
		return fmt.Errorf("close clickhouse %s: %w", s.o.Addr, err)
	}
	return nil
}

// Watermark returns the highest stream sequence whose events consumer has
// stored, 0 when it has stored none.
func (s *Store) Watermark(ctx context.Context, stream, consumer string) (uint64, error) {
	var seq uint64
	err := s.conn.QueryRow(ctx, chsql.Watermark.SQL, stream, consumer).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("read watermark of %s/%s: %w", stream, consumer, err)
	}
	return seq, nil
}

// loadState returns consumer's watermark and the encoded batch windows
// stored with it (” before any batch was applied).
func (s *Store) loadState(ctx context.Context, stream, consumer string) (uint64, []byte, error) {
	var seq uint64
	var windows string
	err := s.conn.QueryRow(ctx, chsql.LoadState.SQL, stream, consumer).Scan(&seq, &windows)
	if err != nil {
		return 0, nil, fmt.Errorf("read watermark of %s/%s: %w", stream, consumer, err)
	}
	return seq, []byte(windows), nil
}

// writeWatermark records that consumer has stored every event of stream up
// to seq, and windows, the encoded record of the batches applied up to it.
func (s *Store) writeWatermark(ctx context.Context, stream, consumer string, seq uint64, windows []byte, now time.Time) error {
	b, err := s.conn.PrepareBatch(ctx, chsql.InsertWatermark.SQL)
	if err != nil {
		return fmt.Errorf("write watermark %d: %w", seq, err)
	}
	if err := b.Append(stream, consumer, seq, now, string(windows)); err != nil {
		_ = b.Abort()
		return fmt.Errorf("write watermark %d: %w", seq, err)
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("write watermark %d: %w", seq, err)
	}
	return nil
}

// insertPrefix starts the query id of every insert into usage_events, so
// that waitInserts can find those still running.
func (s *Store) insertPrefix() string { return "tollgate-load-" + s.o.Database + "-" }

// insertEvents inserts the rows of c in one native batch.
func (s *Store) insertEvents(ctx context.Context, c *columns) error {
	opts := []clickhouse.QueryOption{clickhouse.WithQueryID(s.insertPrefix() + uuid.NewString())}
	if s.insertSettings != nil {
		opts = append(opts, clickhouse.WithSettings(s.insertSettings))
	}
	ctx = clickhouse.Context(ctx, opts...)
	return insertColumns(ctx, s.conn, s.insertSQL, c)
}

// InsertEvents inserts events into the usage_events table of conn's
// database in one native batch, as the loader writes them: seqs[i] is
// events[i]'s stream sequence, and ingested the load time of every row.
// The rows have no producer (legacy messages); InsertSourced writes the
// batch a row came from. It does not look for rows already stored
// (tollctl replay does).
func InsertEvents(ctx context.Context, conn driver.Conn, events []*usagev1.UsageEvent, seqs []uint64, ingested time.Time) error {
	if len(seqs) != len(events) {
		return fmt.Errorf("insert events: %d events but %d sequences", len(events), len(seqs))
	}
	src := make([]Source, len(seqs))
	for i, s := range seqs {
		src[i].StreamSeq = s
	}
	return InsertSourced(ctx, conn, events, src, ingested)
}

// InsertSourced is InsertEvents with each row's whole Source: src[i] is
// where events[i] came from (stream sequence, producer, batch seq). On a
// cluster's schema (the database has IngestTable) it inserts there, so
// that the rollups see the rows.
func InsertSourced(ctx context.Context, conn driver.Conn, events []*usagev1.UsageEvent, src []Source, ingested time.Time) error {
	if len(src) != len(events) {
		return fmt.Errorf("insert events: %d events but %d sources", len(events), len(src))
	}
	var n uint64
	if err := conn.QueryRow(ctx, chsql.TableExists.SQL, IngestTable).Scan(&n); err != nil {
		return fmt.Errorf("insert events: look up %s: %w", IngestTable, err)
	}
	sql := chsql.InsertEvents.SQL
	if n > 0 {
		sql = chsql.InsertEventsInto(IngestTable)
	}
	var c columns
	for i, e := range events {
		c.add(e, src[i], ingested)
	}
	return insertColumns(ctx, conn, sql, &c)
}

// insertColumns inserts the rows of c in one batch with sql, an insert of
// every column of usage_events.
func insertColumns(ctx context.Context, conn driver.Conn, sql string, c *columns) error {
	b, err := conn.PrepareBatch(ctx, sql)
	if err != nil {
		return fmt.Errorf("insert %d events: %w", c.len(), err)
	}
	for i, col := range c.slices() {
		if err := appendColumn(b.Column(i), col); err != nil {
			_ = b.Abort()
			return fmt.Errorf("insert %d events: column %d: %w", c.len(), i, err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert %d events: %w", c.len(), err)
	}
	return nil
}

// Empty arrays boxed once: appending an empty array row allocates nothing.
var (
	noStrings any = []string{}
	noUInt8s  any = []uint8{}
	noInt64s  any = []int64{}
)

// appendColumn appends a whole column. Array columns go row by row with
// their Go type: clickhouse-go's Append of a [][]T walks it by reflection,
// boxing every row and element (about one allocation per row and array
// column, and one per element), which made the array columns cost more
// than all the others.
func appendColumn(bc driver.BatchColumn, col any) error {
	switch v := col.(type) {
	case [][]string:
		return appendRows(bc, v, noStrings)
	case [][]uint8:
		return appendRows(bc, v, noUInt8s)
	case [][]int64:
		return appendRows(bc, v, noInt64s)
	}
	return bc.Append(col)
}

func appendRows[T any](bc driver.BatchColumn, rows [][]T, empty any) error {
	for _, r := range rows {
		var err error
		if len(r) == 0 {
			err = bc.AppendRow(empty)
		} else {
			err = bc.AppendRow(r)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// waitInserts waits until the server runs no insert into usage_events of
// this database (from any loader): an insert whose client gave up (a
// timeout, a crash) may still be running, and what it stores must be seen
// before deciding what to insert again.
func (s *Store) waitInserts(ctx context.Context) error {
	for {
		var n uint64
		err := s.conn.QueryRow(ctx, chsql.RunningInserts.SQL, s.insertPrefix()).Scan(&n)
		if err != nil {
			return fmt.Errorf("look up running inserts: %w", err)
		}
		if n == 0 {
			return nil
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("wait for %d running inserts: %w", n, ctx.Err())
		case <-t.C:
		}
	}
}

// lookupStored waits for running inserts and returns the rows stored under
// the stream sequences in [lo, hi] among rows with ts in [minTS, maxTS]
// (waitInserts, storedRows). On a cluster it asks every server and joins
// what they hold: an insert may be stored only on a replica the others
// have not yet fetched it from, so a server that does not answer fails the
// lookup (the loader retries) rather than leave such rows unseen.
func (s *Store) lookupStored(ctx context.Context, lo, hi uint64, minTS, maxTS uint32) (map[storedRow]struct{}, error) {
	if s.o.Cluster == "" {
		if err := s.waitInserts(ctx); err != nil {
			return nil, err
		}
		return s.storedRows(ctx, lo, hi, minTS, maxTS)
	}
	hosts, err := s.clusterHosts(ctx)
	if err != nil {
		return nil, err
	}
	found := make(map[storedRow]struct{})
	err = s.onEachServer(ctx, hosts, func(st *Store) error {
		if err := st.waitInserts(ctx); err != nil {
			return err
		}
		f, err := st.storedRows(ctx, lo, hi, minTS, maxTS)
		maps.Copy(found, f)
		return err
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}

// storedRow names a stored row: the stream sequence of its message and its
// event id (a batched message holds many).
type storedRow struct {
	seq uint64
	id  string
}

// storedRows returns the rows stored under the stream sequences in [lo, hi]
// among rows with ts in [minTS, maxTS] (Unix seconds). The ts bounds let
// ClickHouse read only the partitions and granules of those times.
func (s *Store) storedRows(ctx context.Context, lo, hi uint64, minTS, maxTS uint32) (map[storedRow]struct{}, error) {
	rows, err := s.conn.Query(ctx, chsql.StoredRows.SQL, minTS, maxTS, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("look up stored events %d..%d: %w", lo, hi, err)
	}
	defer rows.Close()
	found := make(map[storedRow]struct{})
	for rows.Next() {
		var r storedRow
		if err := rows.Scan(&r.seq, &r.id); err != nil {
			return nil, fmt.Errorf("look up stored events %d..%d: %w", lo, hi, err)
		}
		found[r] = struct{}{}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look up stored events %d..%d: %w", lo, hi, err)
	}
	return found, nil
}
