//go:build chdb

package dashboards

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// chDB is ClickHouse's engine as a library (libchdb.so, from the npm
// package @chdb/lib-linux-x64-gnu that scripts/deps.sh installs). It is
// bound here through purego, with the C API's calls that
// github.com/chdb-io/chdb-go uses, but loaded when a test asks for it:
// chdb-go opens the library in its package init and panics without it,
// so a test importing it could not skip.
type chDB struct {
	conn unsafe.Pointer // chdb_connection's internal pointer
	dir  string
}

var chdbAPI struct {
	once    sync.Once
	err     error
	path    string
	connect func(argc int, argv []*byte) *unsafe.Pointer
	close   func(conn *unsafe.Pointer)
	query   func(conn unsafe.Pointer, query, format string) unsafe.Pointer
	buffer  func(res unsafe.Pointer) *byte
	length  func(res unsafe.Pointer) uintptr
	errMsg  func(res unsafe.Pointer) string
	destroy func(res unsafe.Pointer)
}

// chdbVersion is the npm package chdb that scripts/deps.sh installs.
const chdbVersion = "3.4.0"

// chdbLibPath is where the library is: $CHDB_LIB_PATH, else the npm
// install of scripts/deps.sh under $TOLLGATE_CACHE (default the user's
// cache dir's tollgate).
func chdbLibPath() string {
	if p := os.Getenv("CHDB_LIB_PATH"); p != "" {
		return p
	}
	cache := os.Getenv("TOLLGATE_CACHE")
	if cache == "" {
		dir, _ := os.UserCacheDir()
		cache = filepath.Join(dir, "tollgate")
	}
	return filepath.Join(cache, "chdb-"+chdbVersion, "node_modules", "@chdb", "lib-linux-x64-gnu", "libchdb.so")
}

var errNoChDB = errors.New("libchdb.so not found")

func loadChDB() error {
	a := &chdbAPI
	a.once.Do(func() {
		a.path = chdbLibPath()
		if _, err := os.Stat(a.path); err != nil {
			a.err = fmt.Errorf("%w at %s (scripts/deps.sh installs it; or set CHDB_LIB_PATH)", errNoChDB, a.path)
			return
		}
		lib, err := purego.Dlopen(a.path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			a.err = fmt.Errorf("load %s: %w", a.path, err)
			return
		}
		purego.RegisterLibFunc(&a.connect, lib, "chdb_connect")
		purego.RegisterLibFunc(&a.close, lib, "chdb_close_conn")
		purego.RegisterLibFunc(&a.query, lib, "chdb_query")
		purego.RegisterLibFunc(&a.buffer, lib, "chdb_result_buffer")
		purego.RegisterLibFunc(&a.length, lib, "chdb_result_length")
		purego.RegisterLibFunc(&a.errMsg, lib, "chdb_result_error")
		purego.RegisterLibFunc(&a.destroy, lib, "chdb_destroy_query_result")
	})
	return a.err
}

// openChDB opens an engine keeping its tables in a new directory; it is
// closed when t ends. Without the library t is skipped, or fails when
// CI=true. One engine may be open at a time in a process.
func openChDB(t testing.TB) *chDB {
	t.Helper()
	if err := loadChDB(); err != nil {
		if errors.Is(err, errNoChDB) && os.Getenv("CI") != "true" {
			t.Skipf("%v (CI=true makes this fail)", err)
		}
		t.Fatal(err)
	}
	dir := t.TempDir()
	var argv []*byte
	for _, s := range []string{"clickhouse", "--path=" + dir} {
		b := append([]byte(s), 0)
		argv = append(argv, &b[0])
	}
	c := chdbAPI.connect(len(argv), argv)
	if c == nil || *c == nil {
		t.Fatalf("chdb: connect in %s failed", dir)
	}
	db := &chDB{conn: *c, dir: dir}
	t.Cleanup(func() { chdbAPI.close(c) })
	return db
}

// query runs sql and returns its output in format (a ClickHouse format
// name: CSVWithNames, TSV...).
func (db *chDB) query(sql, format string) (string, error) {
	res := chdbAPI.query(db.conn, sql, format)
	if res == nil {
		return "", nil
	}
	defer chdbAPI.destroy(res)
	if msg := chdbAPI.errMsg(res); msg != "" {
		return "", errors.New(msg)
	}
	n := chdbAPI.length(res)
	buf := chdbAPI.buffer(res)
	if buf == nil || n == 0 {
		return "", nil
	}
	return string(unsafe.Slice(buf, n)), nil
}
