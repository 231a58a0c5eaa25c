package billing

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/tollgate/tollgate/pkg/pricing"
)

// fakeStore answers one request id.
type fakeStore struct {
	id  string
	err error
}

func (f fakeStore) Charge(_ context.Context, id string, _ ...*pricing.Table) (*Charge, error) {
	switch {
	case f.err != nil:
		return nil, f.err
	case id == f.id:
		return &Charge{RequestID: id}, nil
	default:
		return nil, fmt.Errorf("%w %s", ErrNotFound, id)
	}
}

func TestLookup(t *testing.T) {
	down := errors.New("connection refused")
	tests := []struct {
		name      string
		store     Store
		id        string
		wantFound bool
		wantErr   error
	}{
		{"found", fakeStore{id: "r1"}, "r1", true, nil},
		{"not found is no error", fakeStore{id: "r1"}, "r2", false, nil},
		{"store error", fakeStore{err: down}, "r1", false, down},
		{"no source", nil, "r1", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &Explainer{Store: tt.store}
			v, found, err := e.Lookup(context.Background(), tt.id)
			if found != tt.wantFound {
				t.Fatalf("found = %v, want %v", found, tt.wantFound)
			}
			if tt.store == nil {
				if err == nil {
					t.Fatal("no source configured: want an error")
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if c, _ := v.(*Charge); found && (c == nil || c.RequestID != tt.id) {
				t.Fatalf("value = %#v", v)
			}
		})
	}
}
