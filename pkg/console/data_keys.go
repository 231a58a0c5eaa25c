package console

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate/pkg/chsql"
)

// LastUsedDays is how far back the keys page looks for a key's last use.
const LastUsedDays = 90

// KeysLastUsed returns the last day ('YYYY-MM-DD', UTC) each key was used
// within the last LastUsedDays days, by key id, from ClickHouse. A key
// missing from the map was not used in that time.
func (d *Data) KeysLastUsed(ctx context.Context) (map[string]string, error) {
	conn, err := d.conn()
	if err != nil {
		return nil, err
	}
	since := d.now().AddDate(0, 0, -LastUsedDays).Format("2006-01-02")
	rows, err := conn.Query(ctx, chsql.ConsoleKeysLastUsed.SQL, since)
	if err != nil {
		return nil, fmt.Errorf("last use of keys: %w", err)
	}
	defer rows.Close()
	last := map[string]string{}
	for rows.Next() {
		var id, day string
		if err := rows.Scan(&id, &day); err != nil {
			return nil, fmt.Errorf("last use of keys: %w", err)
		}
		last[id] = day
	}
	return last, rows.Err()
}
